package workflow

import (
	"encoding/json"
	"errors"
)

// A stored definition is sometimes read one piece at a time: the consumer asks the
// database for every kafkaEvent block and every Kafka entry of an events list, without
// the nodes around them, to learn which topics to read and with which id fields. These
// functions read such a fragment with the node parser itself — the same schema, the same
// defaults — by placing it in a wait_events node of its own. The node around it is
// otherwise empty, so a default that depends on the node (an event's timeout, which is
// the node's) is the node's default.

// ErrFragment is returned, joined with the field errors, for a fragment the node
// parser refuses.
var ErrFragment = errors.New("workflow: invalid wait_events fragment")

// ParseKafkaEventFragment reads a wait_events node's kafkaEvent block on its own. It is
// nil, with no error, when the block is disabled or null.
func ParseKafkaEventFragment(block json.RawMessage) (*KafkaEvent, error) {
	w, err := parseWaitEventsFragment(map[string]any{"kafkaEvent": block})
	if err != nil {
		return nil, err
	}
	return w.KafkaEvent, nil
}

// ParseNamedEventFragment reads one entry of a wait_events node's events list on its own.
func ParseNamedEventFragment(entry json.RawMessage) (NamedEvent, error) {
	w, err := parseWaitEventsFragment(map[string]any{"events": []json.RawMessage{entry}})
	if err != nil {
		return NamedEvent{}, err
	}
	if len(w.Events) != 1 {
		return NamedEvent{}, ErrFragment
	}
	return w.Events[0], nil
}

// parseWaitEventsFragment parses data, a wait_events node's configuration holding the
// fragment, with ParseWaitEventsNode.
func parseWaitEventsFragment(data map[string]any) (*WaitEvents, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, errors.Join(ErrFragment, err)
	}
	cfg, ferrs := ParseWaitEventsNode(raw, "")
	if len(ferrs) > 0 {
		errs := []error{ErrFragment}
		for _, fe := range ferrs {
			errs = append(errs, errors.New(fe.String()))
		}
		return nil, errors.Join(errs...)
	}
	return cfg.(*WaitEvents), nil
}
