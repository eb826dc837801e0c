package wireformat

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// registryBase is where a JSON Schema and its references are placed for compiling: a
// reference's name is resolved against the schema's location, as the registry's own
// serializers resolve it. Nothing is ever loaded from it.
const registryBase = "https://schema-registry.invalid/"

// printer words validation failures.
var printer = message.NewPrinter(language.English)

type jsonSchema struct{ s *jsonschema.Schema }

func (jsonSchema) format() workflow.RecordFormat { return workflow.FormatJSONSchema }

// noLoader refuses every URL a schema names but was not given: a schema from the
// registry must not make this process read its files or the network.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("%s is neither the schema nor one of its references", u)
}

func compileJSONSchema(id int, text string, refs []reference) (compiled, error) {
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	for _, ref := range refs {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(ref.text))
		if err != nil {
			return nil, fmt.Errorf("reference %s: %w", ref.name, err)
		}
		loc := ref.name
		if u, err := url.Parse(ref.name); err != nil || !u.IsAbs() {
			loc = registryBase + ref.name
		}
		if err := c.AddResource(loc, doc); err != nil {
			return nil, fmt.Errorf("reference %s: %w", ref.name, err)
		}
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	loc := fmt.Sprintf("%sschema-%d.json", registryBase, id)
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, err
	}
	return jsonSchema{s}, nil
}

func (j jsonSchema) decode(b []byte) (any, error) {
	v, err := jsonnum.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("value is not JSON: %w", err)
	}
	if err := j.s.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("value does not hold its schema: %s", validationText(ve))
		}
		return nil, err
	}
	return v, nil
}

// validationText names the first failing location and why, for the dead letter's
// reason.
func validationText(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return "at /" + strings.Join(ve.InstanceLocation, "/") + ": " + ve.ErrorKind.LocalizedString(printer)
}
