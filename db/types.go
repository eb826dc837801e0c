package db

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// RegisterTypes teaches a connection's type map the two Go types every statement here
// carries, so that they cross the wire as the bytes they are, and reads timestamps in
// UTC.
//
// Left to pgx's defaults, both took a detour that showed up at the top of the Kafka
// path's CPU profile (rendezvous-bench --only kafka --cpuprofile):
//   - uuid.UUID is a driver.Valuer and an sql.Scanner, so every id, and every element of
//     an id array, was formatted to its 36-character text and parsed back on the way
//     out, and went through text on the way in. Here it is copied as its 16 bytes.
//   - A jsonb column scanned into json.RawMessage was handed to json.Unmarshal, which
//     validates the whole document before copying it. PostgreSQL only ever sends valid
//     JSON, so here it is copied.
//
// pgx returns a timestamptz in the process's local zone, so an API answer, a node output
// or a log line would show the instant in whatever zone the pod happens to run in; in
// UTC they read alike on every replica and compare as strings.
//
// Every other type, and every other Go type for these columns, keeps pgx's own plans.
func RegisterTypes(m *pgtype.Map) {
	tz := &pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID, Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}}
	m.RegisterType(tz)
	m.RegisterType(&pgtype.Type{Name: "_timestamptz", OID: pgtype.TimestamptzArrayOID, Codec: &pgtype.ArrayCodec{ElementType: tz}})
	if t, ok := m.TypeForOID(pgtype.UUIDOID); ok {
		u := &pgtype.Type{Name: t.Name, OID: t.OID, Codec: uuidCodec{t.Codec}}
		m.RegisterType(u)
		m.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: &pgtype.ArrayCodec{ElementType: u}})
	}
	for _, oid := range []uint32{pgtype.JSONBOID, pgtype.JSONOID} {
		if t, ok := m.TypeForOID(oid); ok {
			m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: rawJSONCodec{Codec: t.Codec, jsonb: oid == pgtype.JSONBOID}})
		}
	}
	// The batch statements carry a column per field, a row per element: arrays of ids
	// ([]uuid.UUID), of documents ([]json.RawMessage) and of text ([]string) are written
	// straight into the message, sized once. Through the array codec, every element was
	// boxed, looked at through reflection and appended to a buffer grown by doubling; at
	// a few hundred documents a statement that was the largest allocator of the Kafka
	// path, and the six text arrays of a batch's wait write boxed each of their strings.
	for _, a := range []struct {
		oid  uint32
		elem uint32
	}{{pgtype.UUIDArrayOID, pgtype.UUIDOID}, {pgtype.JSONArrayOID, pgtype.JSONOID}, {pgtype.JSONBArrayOID, pgtype.JSONBOID},
		{pgtype.TextArrayOID, pgtype.TextOID}} {
		if t, ok := m.TypeForOID(a.oid); ok {
			m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: rowArrayCodec{Codec: t.Codec, elem: a.elem}})
		}
	}
	// Arrays of instants are handed to the array codec as a FlatArray, which it indexes
	// directly, where pgx's own fallback reaches each element through reflection.
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{wrapFlatSlice[time.Time]}, m.TryWrapEncodePlanFuncs...)
}

// rowArrayCodec is a one-dimensional array of uuid, json, jsonb or text (elem) with
// []uuid.UUID, []json.RawMessage or []string written directly in the binary format;
// anything else is the wrapped codec's.
type rowArrayCodec struct {
	pgtype.Codec
	elem uint32
}

func (c rowArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch value.(type) {
		case []uuid.UUID:
			if c.elem == pgtype.UUIDOID {
				return encodeUUIDArray{}
			}
		case []json.RawMessage:
			if c.elem == pgtype.JSONOID || c.elem == pgtype.JSONBOID {
				return encodeDocArray{elem: c.elem}
			}
		case []string:
			if c.elem == pgtype.TextOID {
				return encodeTextArray{}
			}
		}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// arrayHeaderLen is the size of a one-dimensional array's header in the binary format:
// the number of dimensions, the has-nulls flag, the element type, then the dimension's
// length and lower bound.
const arrayHeaderLen = 5 * 4

// appendArrayHeader appends the header of a one-dimensional array of n elements of type
// elem, numbered from 1, as PostgreSQL's array_recv reads it.
func appendArrayHeader(buf []byte, elem uint32, n int, hasNull bool) []byte {
	var null uint32
	if hasNull {
		null = 1
	}
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = binary.BigEndian.AppendUint32(buf, null)
	buf = binary.BigEndian.AppendUint32(buf, elem)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1)
}

// growParams makes room for n more bytes in buf, which holds the parameters of one
// statement encoded so far: pgx encodes each after the previous ones in one buffer,
// started small for every statement. A batch's arrays are tens of kilobytes each, so
// growing by just what one needs would copy everything before it again for the next; the
// room doubles instead.
func growParams(buf []byte, n int) []byte {
	if cap(buf)-len(buf) >= n {
		return buf
	}
	return slices.Grow(buf, max(n, len(buf)+n))
}

// uuidArrayBytes is the binary encoding's size of an array of n uuids: each element is
// led by its length.
func uuidArrayBytes(n int) int { return arrayHeaderLen + n*(4+16) }

// docArrayBytes is the binary encoding's size of an array of documents, each led by its
// length and prefix bytes (jsonb's version byte), and whether one of them is NULL.
func docArrayBytes(docs []json.RawMessage, prefix int) (size int, hasNull bool) {
	size = arrayHeaderLen
	for _, d := range docs {
		size += 4
		if d == nil {
			hasNull = true
			continue
		}
		size += prefix + len(d)
	}
	return size, hasNull
}

type encodeUUIDArray struct{}

func (encodeUUIDArray) Encode(value any, buf []byte) ([]byte, error) {
	s := value.([]uuid.UUID)
	if s == nil {
		return nil, nil // NULL, as pgx writes a nil slice
	}
	buf = growParams(buf, uuidArrayBytes(len(s)))
	buf = appendArrayHeader(buf, pgtype.UUIDOID, len(s), false)
	for i := range s {
		buf = binary.BigEndian.AppendUint32(buf, 16)
		buf = append(buf, s[i][:]...)
	}
	return buf, nil
}

// encodeDocArray writes documents as elements of type elem, json or jsonb (each led by
// jsonb's version byte); a nil document is NULL. The text is sent as it is: PostgreSQL
// checks it.
type encodeDocArray struct{ elem uint32 }

func (p encodeDocArray) Encode(value any, buf []byte) ([]byte, error) {
	s := value.([]json.RawMessage)
	if s == nil {
		return nil, nil // NULL, as pgx writes a nil slice
	}
	prefix := 0 // bytes before each document's text: jsonb's format version
	if p.elem == pgtype.JSONBOID {
		prefix = 1
	}
	size, hasNull := docArrayBytes(s, prefix)
	buf = growParams(buf, size)
	buf = appendArrayHeader(buf, p.elem, len(s), hasNull)
	for _, d := range s {
		if d == nil {
			buf = binary.BigEndian.AppendUint32(buf, math.MaxUint32) // -1: NULL
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(prefix+len(d)))
		if prefix > 0 {
			buf = append(buf, 1)
		}
		buf = append(buf, d...)
	}
	return buf, nil
}

// textArrayBytes is the binary encoding's size of an array of texts, each led by its
// length.
func textArrayBytes(s []string) int {
	size := arrayHeaderLen
	for _, e := range s {
		size += 4 + len(e)
	}
	return size
}

// encodeTextArray writes texts as elements of type text. The bytes are sent as they are,
// as pgx sends a text: PostgreSQL checks their encoding.
type encodeTextArray struct{}

func (encodeTextArray) Encode(value any, buf []byte) ([]byte, error) {
	s := value.([]string)
	if s == nil {
		return nil, nil // NULL, as pgx writes a nil slice
	}
	buf = growParams(buf, textArrayBytes(s))
	buf = appendArrayHeader(buf, pgtype.TextOID, len(s), false)
	for _, e := range s {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(e)))
		buf = append(buf, e...)
	}
	return buf, nil
}

// uuidCodec is PostgreSQL's uuid with uuid.UUID read and written as its 16 bytes in the
// binary format; anything else is the wrapped codec's.
type uuidCodec struct{ pgtype.Codec }

func (c uuidCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch value.(type) {
		case uuid.UUID:
			return encodeUUID{}
		case *uuid.UUID:
			return encodeUUIDPointer{}
		}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

func (c uuidCodec) PlanScan(m *pgtype.Map, oid uint32, format int16, target any) pgtype.ScanPlan {
	if format == pgtype.BinaryFormatCode {
		switch target.(type) {
		case *uuid.UUID:
			return scanUUID{}
		case **uuid.UUID:
			return scanUUIDPointer{}
		}
	}
	return c.Codec.PlanScan(m, oid, format, target)
}

type encodeUUID struct{}

func (encodeUUID) Encode(value any, buf []byte) ([]byte, error) {
	u := value.(uuid.UUID)
	return append(buf, u[:]...), nil
}

type encodeUUIDPointer struct{}

func (encodeUUIDPointer) Encode(value any, buf []byte) ([]byte, error) {
	u := value.(*uuid.UUID)
	if u == nil {
		return nil, nil // NULL
	}
	return append(buf, u[:]...), nil
}

type scanUUID struct{}

func (scanUUID) Scan(src []byte, dst any) error {
	if src == nil {
		return errors.New("cannot scan NULL into *uuid.UUID")
	}
	if len(src) != 16 {
		return fmt.Errorf("invalid length for uuid: %d", len(src))
	}
	copy(dst.(*uuid.UUID)[:], src)
	return nil
}

type scanUUIDPointer struct{}

func (scanUUIDPointer) Scan(src []byte, dst any) error {
	p := dst.(**uuid.UUID)
	if src == nil {
		*p = nil
		return nil
	}
	var u uuid.UUID
	if err := (scanUUID{}).Scan(src, &u); err != nil {
		return err
	}
	*p = &u
	return nil
}

// wrapFlatSlice hands a []T to the array codec as a FlatArray, which it indexes
// directly, where pgx's own fallback reaches each element through reflection.
func wrapFlatSlice[T any](value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if s, ok := value.([]T); ok {
		return &flatSliceEncodePlan[T]{}, pgtype.FlatArray[T](s), true
	}
	return nil, nil, false
}

type flatSliceEncodePlan[T any] struct{ next pgtype.EncodePlan }

func (p *flatSliceEncodePlan[T]) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *flatSliceEncodePlan[T]) Encode(value any, buf []byte) ([]byte, error) {
	s := value.([]T)
	if s == nil {
		return nil, nil // NULL, as pgx writes a nil slice
	}
	return p.next.Encode(pgtype.FlatArray[T](s), buf)
}

// rawJSONCodec is json or jsonb with json.RawMessage scanned by copying the document;
// anything else is the wrapped codec's.
type rawJSONCodec struct {
	pgtype.Codec
	// jsonb: the binary format leads with a version byte.
	jsonb bool
}

func (c rawJSONCodec) PlanScan(m *pgtype.Map, oid uint32, format int16, target any) pgtype.ScanPlan {
	if _, ok := target.(*json.RawMessage); ok {
		return scanRawJSON{versioned: c.jsonb && format == pgtype.BinaryFormatCode}
	}
	return c.Codec.PlanScan(m, oid, format, target)
}

type scanRawJSON struct{ versioned bool }

func (s scanRawJSON) Scan(src []byte, dst any) error {
	p := dst.(*json.RawMessage)
	if src == nil {
		*p = nil // SQL NULL, as json.Unmarshal would leave it
		return nil
	}
	if s.versioned {
		if len(src) == 0 {
			return errors.New("jsonb too short")
		}
		if src[0] != 1 {
			return fmt.Errorf("unknown jsonb version number %d", src[0])
		}
		src = src[1:]
	}
	*p = append(json.RawMessage(nil), src...)
	return nil
}
