package aggregator_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
)

// TestParseSent checks the one parser of a sent event's JSON object, which both the HTTP
// API and the Kafka events topic read it with: what each form accepts, and for each
// refusal its kind and the member at fault.
func TestParseSent(t *testing.T) {
	long := strings.Repeat("é", aggregator.MaxEventTextLen+1)
	fits := strings.Repeat("é", aggregator.MaxEventTextLen)
	const exec = "0a6a3b0e-5a41-4c0e-9a52-3f0d2c5e8a11"

	t.Run("accepted", func(t *testing.T) {
		for _, c := range []struct {
			name string
			form aggregator.SentForm
			raw  string
			want aggregator.SentWire
		}{
			{"type only", aggregator.SentBody, `{"type": "approved"}`, aggregator.SentWire{Type: "approved"}},
			{"every member", aggregator.SentBody, `{"type": "a", "payload": {"n": 1}, "id": "e-1"}`,
				aggregator.SentWire{Type: "a", Payload: json.RawMessage(`{"n": 1}`), ID: "e-1", HasID: true}},
			{"null id is absent", aggregator.SentBody, `{"type": "a", "id": null}`, aggregator.SentWire{Type: "a"}},
			{"null payload kept as sent", aggregator.SentBody, `{"type": "a", "payload": null}`,
				aggregator.SentWire{Type: "a", Payload: json.RawMessage(`null`)}},
			{"longest type", aggregator.SentBody, `{"type": "` + fits + `"}`, aggregator.SentWire{Type: fits}},
			{"record with execution", aggregator.SentRecord, `{"execution_id": "` + exec + `", "type": "a"}`,
				aggregator.SentWire{ExecutionID: exec, Type: "a"}},
			{"record with null execution", aggregator.SentRecord, `{"execution_id": null, "type": "a"}`,
				aggregator.SentWire{Type: "a"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				got, err := aggregator.ParseSent([]byte(c.raw), c.form)
				require.NoError(t, err)
				require.Equal(t, c.want, got)
			})
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			name    string
			form    aggregator.SentForm
			raw     string
			refusal aggregator.SentRefusal
			field   string
			reason  string
		}{
			{"empty", aggregator.SentBody, " ", aggregator.SentEmpty, "", "empty"},
			{"not JSON", aggregator.SentRecord, `{"type": `, aggregator.SentNotJSON, "", "unexpected EOF"},
			{"trailing data", aggregator.SentBody, `{"type": "a"} {}`, aggregator.SentNotJSON, "", "unexpected data after the JSON object"},
			{"array then garbage is not JSON", aggregator.SentRecord, `[1] x`, aggregator.SentNotJSON, "", "unexpected data"},
			{"array", aggregator.SentBody, `["a"]`, aggregator.SentNotObject, "", "not a JSON object"},
			{"null", aggregator.SentRecord, `null`, aggregator.SentNotObject, "", "null, not a JSON object"},
			{"unknown member", aggregator.SentRecord, `{"type": "a", "paylod": {}}`, aggregator.SentUnknownMember, "paylod", "unknown member"},
			{"member names are exact", aggregator.SentBody, `{"Type": "a"}`, aggregator.SentUnknownMember, "Type", "unknown member"},
			{"execution_id is not a body member", aggregator.SentBody, `{"execution_id": "` + exec + `", "type": "a"}`,
				aggregator.SentUnknownMember, "execution_id", "unknown member"},
			{"type not a string", aggregator.SentBody, `{"type": 5}`, aggregator.SentNotString, "type", "must be a string, not number"},
			{"id not a string", aggregator.SentRecord, `{"type": "a", "id": {}}`, aggregator.SentNotString, "id", "must be a string, not object"},
			{"execution_id not a string", aggregator.SentRecord, `{"execution_id": true, "type": "a"}`, aggregator.SentNotString, "execution_id", "must be a string, not bool"},
			{"no type", aggregator.SentRecord, `{"payload": 1}`, aggregator.SentMissingMember, "type", "required"},
			{"null type", aggregator.SentBody, `{"type": null}`, aggregator.SentMissingMember, "type", "required"},
			{"empty type", aggregator.SentBody, `{"type": ""}`, aggregator.SentInvalidMember, "type", "must be 1 to 200 characters"},
			{"type too long", aggregator.SentRecord, `{"type": "` + long + `"}`, aggregator.SentInvalidMember, "type", "must be 1 to 200 characters"},
			{"type holding NUL", aggregator.SentBody, `{"type": "a\u0000"}`, aggregator.SentInvalidMember, "type", "must not contain NUL"},
			{"empty id", aggregator.SentBody, `{"type": "a", "id": ""}`, aggregator.SentInvalidMember, "id", "must be 1 to 200 characters"},
			{"id too long", aggregator.SentBody, `{"type": "a", "id": "` + long + `"}`, aggregator.SentInvalidMember, "id", "must be 1 to 200 characters"},
		} {
			t.Run(c.name, func(t *testing.T) {
				_, err := aggregator.ParseSent([]byte(c.raw), c.form)
				we, ok := err.(*aggregator.SentWireError)
				require.True(t, ok, "want a *SentWireError, got %v", err)
				require.Equal(t, c.refusal, we.Refusal, "%v", we)
				require.Equal(t, c.field, we.Field)
				require.Contains(t, we.Reason, c.reason)
			})
		}
	})
}
