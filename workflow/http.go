package workflow

import (
	"encoding/json"
	"time"
)

// HTTP node timeouts: the node blocks an executor slot while waiting, so
// long waits belong in wait_events instead.
const (
	DefaultHTTPTimeout = 10 * time.Second
	MaxHTTPTimeout     = 60 * time.Second
)

// HTTP is the configuration of an http node: one synchronous request whose
// response becomes the node output.
type HTTP struct {
	URL          string
	Method       string            // default GET
	Headers      map[string]string // values may contain templates
	Body         any               // object, array or string, may contain templates; nil when absent
	Timeout      time.Duration     // default 10s, at most 60s
	FailOnNon2xx bool              // JSON "failOnNon2xx", default true
	// FollowRedirects follows 3xx answers to destinations the egress policy allows;
	// default false: a 3xx is the response.
	FollowRedirects bool
}

// ParseHTTPNode is the NodeParser for http nodes; config is an *HTTP with
// defaults applied. The data is validated against http.json first.
func ParseHTTPNode(data json.RawMessage, path string) (any, []FieldError) {
	var errs errList
	o, ok := parseNodeData(TypeHTTP, data, path, &errs)
	if !ok {
		return nil, errs
	}
	h := &HTTP{
		URL:             o.url(),
		Method:          o.method("GET"),
		Headers:         o.headers(),
		Body:            o.body(),
		Timeout:         o.duration("timeout", DefaultHTTPTimeout),
		FailOnNon2xx:    o.boolean("failOnNon2xx", true),
		FollowRedirects: o.boolean("followRedirects", false),
	}
	// The schema bounds a number of seconds; a duration string is only
	// known once parsed.
	if h.Timeout > MaxHTTPTimeout {
		errs.add(o.p("timeout"), "must be at most %s", MaxHTTPTimeout)
		h.Timeout = MaxHTTPTimeout
	}
	return h, errs
}
