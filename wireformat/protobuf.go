package wireformat

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// messageIndexMax bounds the message indexes a record may carry: nesting deeper than
// this names no message of any real schema.
const messageIndexMax = 64

type protoSchema struct{ file protoreflect.FileDescriptor }

func (protoSchema) format() workflow.RecordFormat { return workflow.FormatProtobuf }

// compileProtobuf compiles the registry's schema, the references served under the
// names it imports them by and the well-known types from protocompile's own copies (a
// registry does not require references for those). A schema is .proto text, or — as
// Confluent's Python client registers it — a base64 FileDescriptorProto.
func compileProtobuf(id int, text string, refs []reference) (compiled, error) {
	main := fmt.Sprintf("registry-schema-%d.proto", id)
	srcs := map[string]string{main: text}
	for _, ref := range refs {
		srcs[ref.name] = ref.text
	}
	resolve := protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
		text, ok := srcs[path]
		if !ok {
			return protocompile.SearchResult{}, fs.ErrNotExist
		}
		if fdp := descriptorOf(text); fdp != nil {
			fdp.Name = proto.String(path)
			return protocompile.SearchResult{Proto: fdp}, nil
		}
		return protocompile.SearchResult{Source: strings.NewReader(text)}, nil
	})
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(resolve)}
	files, err := c.Compile(context.Background(), main)
	if err != nil {
		return nil, err
	}
	return protoSchema{file: files[0]}, nil
}

// descriptorOf reads text as a base64 FileDescriptorProto; nil when it is not one (it
// is .proto text: base64 has no white space or semicolons, a .proto file has both).
func descriptorOf(text string) *descriptorpb.FileDescriptorProto {
	text = strings.TrimSpace(text)
	if strings.ContainsAny(text, " \t\n;{") {
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(text)
	if err != nil {
		return nil
	}
	fdp := &descriptorpb.FileDescriptorProto{}
	if err := proto.Unmarshal(raw, fdp); err != nil {
		return nil
	}
	// protocompile's linker takes a field without json_name for one with the custom
	// JSON name "" (which all such fields would share), where protoc fills in the default
	// when it hands descriptors on; serialized descriptors (the Python client's) have
	// none. The default is filled in here, as protoc does.
	for _, f := range fdp.GetExtension() {
		defaultJSONName(f)
	}
	for _, m := range fdp.GetMessageType() {
		defaultJSONNames(m)
	}
	return fdp
}

func defaultJSONNames(m *descriptorpb.DescriptorProto) {
	for _, f := range m.GetField() {
		defaultJSONName(f)
	}
	for _, f := range m.GetExtension() {
		defaultJSONName(f)
	}
	for _, n := range m.GetNestedType() {
		defaultJSONNames(n)
	}
}

// defaultJSONName sets f's JSON name, when it has none, to protoc's default: the name
// in lowerCamelCase (each underscore dropped, the letter after it in upper case).
func defaultJSONName(f *descriptorpb.FieldDescriptorProto) {
	if f.JsonName != nil {
		return
	}
	var b strings.Builder
	upper := false
	for _, r := range f.GetName() {
		switch {
		case r == '_':
			upper = true
		case upper && 'a' <= r && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			upper = false
		default:
			b.WriteRune(r)
			upper = false
		}
	}
	f.JsonName = proto.String(b.String())
}

func (p protoSchema) decode(b []byte) (any, error) {
	var h sr.ConfluentHeader
	index, rest, err := h.DecodeIndex(b, messageIndexMax)
	if err != nil {
		return nil, fmt.Errorf("message indexes: %w", err)
	}
	md, err := p.message(index)
	if err != nil {
		return nil, err
	}
	msg := dynamicpb.NewMessage(md)
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(rest, msg); err != nil {
		return nil, fmt.Errorf("%s: %w", md.FullName(), err)
	}
	return protoMessage(msg)
}

// message finds the message the indexes name: the first among the file's top-level
// messages, each next one among the previous one's nested messages.
func (p protoSchema) message(index []int) (protoreflect.MessageDescriptor, error) {
	msgs := p.file.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range index {
		if i < 0 || i >= msgs.Len() {
			return nil, fmt.Errorf("message index %v names no message of the schema", index)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	if md == nil {
		return nil, fmt.Errorf("message index %v names no message", index)
	}
	return md, nil
}

// protoMessage maps a message into the JSON value model (see Registry.Decode for the
// rules).
func protoMessage(m protoreflect.Message) (any, error) {
	md := m.Descriptor()
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return protoWellKnown(m)
	}
	fields := md.Fields()
	out := make(map[string]any, fields.Len())
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && !m.Has(fd) {
			continue // of a oneof, only the member set appears
		}
		name := string(fd.Name())
		switch {
		case fd.IsList():
			l := m.Get(fd).List()
			arr := make([]any, l.Len())
			for j := range l.Len() {
				v, err := protoValue(fd, l.Get(j))
				if err != nil {
					return nil, fmt.Errorf("%s[%d]: %w", name, j, err)
				}
				arr[j] = v
			}
			out[name] = arr
		case fd.IsMap():
			mp := m.Get(fd).Map()
			obj := make(map[string]any, mp.Len())
			var err error
			mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				var x any
				x, err = protoValue(fd.MapValue(), v)
				obj[validText(k.String())] = x
				return err == nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out[name] = obj
		case fd.HasPresence() && !m.Has(fd):
			out[name] = nil // an unset message or optional field
		default:
			v, err := protoValue(fd, m.Get(fd))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out[name] = v
		}
	}
	return out, nil
}

// protoValue maps one singular value of field fd.
func protoValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) (any, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return v.Bool(), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return json.Number(strconv.FormatInt(v.Int(), 10)), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return json.Number(strconv.FormatUint(v.Uint(), 10)), nil
	case protoreflect.FloatKind:
		return floatValue(v.Float(), 32), nil
	case protoreflect.DoubleKind:
		return floatValue(v.Float(), 64), nil
	case protoreflect.StringKind:
		return validText(v.String()), nil
	case protoreflect.BytesKind:
		return base64.StdEncoding.EncodeToString(v.Bytes()), nil
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name()), nil
		}
		return json.Number(strconv.FormatInt(int64(v.Enum()), 10)), nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return protoMessage(v.Message())
	}
	return nil, fmt.Errorf("unsupported field kind %s", fd.Kind())
}

// protoWellKnown maps a google.protobuf message: wrappers are their value, Timestamp
// RFC 3339 in UTC, the others their canonical JSON form.
func protoWellKnown(m protoreflect.Message) (any, error) {
	md := m.Descriptor()
	switch md.Name() {
	case "DoubleValue", "FloatValue", "Int64Value", "UInt64Value", "Int32Value", "UInt32Value", "BoolValue", "StringValue", "BytesValue":
		fd := md.Fields().ByName("value")
		return protoValue(fd, m.Get(fd))
	case "Timestamp":
		secs, nanos := m.Get(md.Fields().ByName("seconds")).Int(), m.Get(md.Fields().ByName("nanos")).Int()
		return time.Unix(secs, nanos).UTC().Format(time.RFC3339Nano), nil
	}
	raw, err := protojson.Marshal(m.Interface())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", md.FullName(), err)
	}
	return jsonnum.Decode(raw)
}
