package wireformat

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hamba/avro/v2"

	"github.com/rendezvous-run/rendezvous/workflow"
)

// avroAPI decodes with bounds on what one value may allocate: a record is at most the
// consumer's largest value, so a length beyond it is a corrupt value, not a reason to
// allocate gigabytes.
var avroAPI = avro.Config{MaxByteSliceSize: 1 << 20, MaxSliceAllocSize: 1 << 20}.Freeze()

type avroSchema struct{ s avro.Schema }

func (avroSchema) format() workflow.RecordFormat { return workflow.FormatAvro }

// compileAvro parses text, the references' named types first (each into the same
// cache, as the registry's Avro serializers resolve them).
func compileAvro(text string, refs []reference) (compiled, error) {
	cache := &avro.SchemaCache{}
	for _, ref := range refs {
		if _, err := avro.ParseWithCache(ref.text, "", cache); err != nil {
			return nil, fmt.Errorf("reference %s: %w", ref.name, err)
		}
	}
	s, err := avro.ParseWithCache(text, "", cache)
	if err != nil {
		return nil, err
	}
	return avroSchema{s}, nil
}

func (a avroSchema) decode(b []byte) (any, error) {
	// Read with a Reader rather than Unmarshal, which takes running out of bytes for the
	// end of the value: a value cut short must fail, not decode into zeros.
	r := avro.NewReader(nil, 0, avro.WithReaderConfig(avroAPI)).Reset(b)
	var out any
	r.ReadVal(a.s, &out)
	if r.Error != nil {
		if errors.Is(r.Error, io.EOF) || errors.Is(r.Error, io.ErrUnexpectedEOF) {
			return nil, errors.New("avro: the value ends early")
		}
		return nil, r.Error
	}
	if r.Peek(); r.Error == nil {
		return nil, errors.New("avro: bytes left after the value")
	}
	return avroValue(a.s, out)
}

// avroValue maps a value hamba decoded generically (see Registry.Decode for the rules)
// into the JSON value model, guided by its schema.
func avroValue(s avro.Schema, v any) (any, error) {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	var logical avro.LogicalType
	if ls, ok := s.(avro.LogicalTypeSchema); ok && ls.Logical() != nil {
		logical = ls.Logical().Type()
	}
	switch s.Type() {
	case avro.Null:
		return nil, nil
	case avro.Boolean:
		return v, nil
	case avro.String, avro.Enum:
		if x, ok := v.(string); ok {
			return validText(x), nil
		}
	case avro.Int, avro.Long:
		if out, ok := avroIntegral(v, logical); ok {
			return out, nil
		}
	case avro.Float:
		if x, ok := v.(float32); ok {
			return floatValue(float64(x), 32), nil
		}
	case avro.Double:
		if x, ok := v.(float64); ok {
			return floatValue(x, 64), nil
		}
	case avro.Bytes, avro.Fixed:
		if out, ok := avroBytes(s, v); ok {
			return out, nil
		}
	case avro.Record:
		m, _ := v.(map[string]any)
		fields := s.(*avro.RecordSchema).Fields()
		out := make(map[string]any, len(fields))
		for _, f := range fields {
			fv, err := avroValue(f.Type(), m[f.Name()])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name(), err)
			}
			out[f.Name()] = fv
		}
		return out, nil
	case avro.Array:
		items, _ := v.([]any)
		out := make([]any, len(items))
		for i, it := range items {
			iv, err := avroValue(s.(*avro.ArraySchema).Items(), it)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = iv
		}
		return out, nil
	case avro.Map:
		m, _ := v.(map[string]any)
		out := make(map[string]any, len(m))
		for k, mv := range m {
			x, err := avroValue(s.(*avro.MapSchema).Values(), mv)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[validText(k)] = x
		}
		return out, nil
	case avro.Union:
		return avroUnion(s.(*avro.UnionSchema), v)
	}
	return nil, fmt.Errorf("unexpected %T for an Avro %s", v, s.Type())
}

// avroIntegral is an int or long as an exact JSON number, or its logical type's text (a
// date, a timestamp, a time of day).
func avroIntegral(v any, logical avro.LogicalType) (any, bool) {
	switch x := v.(type) {
	case int:
		return json.Number(strconv.Itoa(x)), true
	case int64:
		return json.Number(strconv.FormatInt(x, 10)), true
	case int32:
		return json.Number(strconv.FormatInt(int64(x), 10)), true
	case time.Time:
		if logical == avro.Date {
			return x.UTC().Format(time.DateOnly), true
		}
		return x.UTC().Format(time.RFC3339Nano), true
	case time.Duration:
		return timeOfDay(x), true
	}
	return nil, false
}

// avroBytes is bytes or a fixed as base64, or its logical type's value (an exact
// decimal, a duration).
func avroBytes(s avro.Schema, v any) (any, bool) {
	switch x := v.(type) {
	case *big.Rat:
		scale := 0
		if d, ok := s.(avro.LogicalTypeSchema).Logical().(*avro.DecimalLogicalSchema); ok {
			scale = d.Scale()
		}
		return json.Number(x.FloatString(scale)), true
	case []byte:
		return base64.StdEncoding.EncodeToString(x), true
	case avro.LogicalDuration:
		return map[string]any{"months": json.Number(strconv.FormatUint(uint64(x.Months), 10)),
			"days": json.Number(strconv.FormatUint(uint64(x.Days), 10)), "milliseconds": json.Number(strconv.FormatUint(uint64(x.Milliseconds), 10))}, true
	default:
		// A fixed arrives as a byte array of its size.
		rv := reflect.ValueOf(v)
		if rv.Kind() == reflect.Array && rv.Type().Elem().Kind() == reflect.Uint8 {
			b := make([]byte, rv.Len())
			reflect.Copy(reflect.ValueOf(b), rv)
			return base64.StdEncoding.EncodeToString(b), true
		}
	}
	return nil, false
}

// avroUnion is a union's value: its branch's, unwrapped.
func avroUnion(s *avro.UnionSchema, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	branches := s.Types()
	// hamba hands a branch it resolves to a Go type over as its value, and one it
	// does not (a named type) as {branch name: value}.
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		for name, bv := range m {
			for _, branch := range branches {
				if avroBranchName(branch) == name {
					return avroValue(branch, bv)
				}
			}
		}
	}
	for _, branch := range branches {
		if branch.Type() == avro.Null {
			continue
		}
		if out, err := avroValue(branch, v); err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("a %T fits no branch of the union", v)
}

// avroBranchName is the name hamba keys a union's value by: a named type's full name,
// else the type, with its logical type after a dot.
func avroBranchName(s avro.Schema) string {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	name := string(s.Type())
	if ls, ok := s.(avro.LogicalTypeSchema); ok && ls.Logical() != nil {
		name += "." + string(ls.Logical().Type())
	}
	return name
}

// validText is s with each byte that is not UTF-8 replaced by U+FFFD, as encoding/json
// writes it: the value and its JSON text must say the same.
func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// floatValue is a float's shortest exact decimal at its width, or, for the values JSON
// cannot write, their name.
func floatValue(f float64, bits int) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, bits))
}

// timeOfDay is an Avro time-millis or time-micros as RFC 3339's partial-time.
func timeOfDay(d time.Duration) string {
	return time.Time{}.Add(d).Format("15:04:05.999999")
}
