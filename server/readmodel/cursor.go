package readmodel

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// A cursor is opaque to clients and the same for every list: base64url (no padding) of
// a kind byte, naming the list that made it, then the sort key of the last item of the
// page. The kind lets a list refuse another list's cursor, with a reason that names it,
// instead of silently positioning itself at a key of the wrong table. Decoding is
// strict: each position has exactly one spelling, so anything that decodes is a cursor
// this package could have made.
//
// The keys come in three shapes:
//   - time and id: created_at in Unix microseconds (8 bytes, big-endian), then the
//     UUID (16 bytes);
//   - name: the UTF-8 bytes of a name, at least one, no NUL;
//   - id: a positive int64 (8 bytes, big-endian).
type kind byte

// The lists' kinds. One byte value per list, never reused, so that an old cursor cannot
// position another list.
const (
	kindWaitStates  kind = 'w'
	kindExecutions  kind = 'e'
	kindWorkflows   kind = 'n'
	kindTokens      kind = 't'
	kindAudit       kind = 'a'
	kindUnmatched   kind = 'u'
	kindDeadLetters kind = 'd'
)

// shape is the form of a list's key.
type shape int

const (
	shapeTimeID shape = iota
	shapeName
	shapeID
)

// kinds names each kind's list, for the refusal of a cursor given to another list, and
// the shape of its key: a cursor is said to be another list's only when it is one.
var kinds = map[kind]struct {
	list  string
	shape shape
}{
	kindWaitStates:  {"wait states", shapeTimeID},
	kindExecutions:  {"executions", shapeTimeID},
	kindWorkflows:   {"workflows", shapeName},
	kindTokens:      {"tokens", shapeName},
	kindAudit:       {"the audit log", shapeID},
	kindUnmatched:   {"unmatched events", shapeID},
	kindDeadLetters: {"dead letters", shapeID},
}

var cursorEncoding = base64.RawURLEncoding.Strict()

const passUnchanged = "pass next_cursor of the previous page unchanged"

func errCursor() error {
	return &QueryError{Param: "cursor", Reason: "not a cursor of this list; " + passUnchanged}
}

// A cursor's time lies within years PostgreSQL and Go both represent; anything else was
// not made by this package.
const cursorMinYear, cursorMaxYear = 1, 9999

func encodeCursor(k kind, key []byte) string {
	return cursorEncoding.EncodeToString(append([]byte{byte(k)}, key...))
}

// decodeCursor returns the key of a cursor of kind k, or a QueryError: one saying which
// list a cursor of another list belongs to, or that s is no cursor at all.
func decodeCursor(k kind, s string) ([]byte, error) {
	b, err := cursorEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, errCursor()
	}
	got, key := kind(b[0]), b[1:]
	info, known := kinds[got]
	if !known || !validKey(info.shape, key) {
		return nil, errCursor()
	}
	if got != k {
		return nil, &QueryError{Param: "cursor", Reason: fmt.Sprintf("a cursor of %s, not of %s; %s", info.list, kinds[k].list, passUnchanged)}
	}
	return key, nil
}

func validKey(sh shape, key []byte) bool {
	var ok bool
	switch sh {
	case shapeTimeID:
		_, _, ok = parseTimeID(key)
	case shapeName:
		_, ok = parseName(key)
	case shapeID:
		_, ok = parseID(key)
	}
	return ok
}

func encodeTimeID(k kind, at time.Time, id uuid.UUID) string {
	key := binary.BigEndian.AppendUint64(make([]byte, 0, 8+16), uint64(at.UnixMicro()))
	return encodeCursor(k, append(key, id[:]...))
}

func parseTimeID(key []byte) (time.Time, uuid.UUID, bool) {
	if len(key) != 8+16 {
		return time.Time{}, uuid.Nil, false
	}
	at := time.UnixMicro(int64(binary.BigEndian.Uint64(key[:8]))).UTC()
	if at.Year() < cursorMinYear || at.Year() > cursorMaxYear {
		return time.Time{}, uuid.Nil, false
	}
	id, err := uuid.FromBytes(key[8:])
	return at, id, err == nil
}

func decodeTimeID(k kind, s string) (time.Time, uuid.UUID, error) {
	key, err := decodeCursor(k, s)
	if err != nil {
		return time.Time{}, uuid.Nil, err
	}
	at, id, _ := parseTimeID(key) // valid: decodeCursor checked it
	return at, id, nil
}

func encodeName(k kind, name string) string {
	return encodeCursor(k, []byte(name))
}

func parseName(key []byte) (string, bool) {
	ok := len(key) > 0 && utf8.Valid(key) && strings.IndexByte(string(key), 0) < 0
	return string(key), ok
}

func decodeName(k kind, s string) (string, error) {
	key, err := decodeCursor(k, s)
	if err != nil {
		return "", err
	}
	name, _ := parseName(key)
	return name, nil
}

func encodeID(k kind, id int64) string {
	return encodeCursor(k, binary.BigEndian.AppendUint64(nil, uint64(id)))
}

func parseID(key []byte) (int64, bool) {
	if len(key) != 8 {
		return 0, false
	}
	id := binary.BigEndian.Uint64(key)
	return int64(id), id >= 1 && id <= math.MaxInt64
}

func decodeID(k kind, s string) (int64, error) {
	key, err := decodeCursor(k, s)
	if err != nil {
		return 0, err
	}
	id, _ := parseID(key)
	return id, nil
}
