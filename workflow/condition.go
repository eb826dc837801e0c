package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
)

// maxConditionLen bounds condition source so a definition cannot make
// validation or evaluation arbitrarily expensive.
const maxConditionLen = 4096

// conditionEnv declares the names a condition may use. The fields are typed
// any so that member access on dynamic maps type-checks at compile time
// (output.status >= 400) while unknown top-level names are still rejected.
type conditionEnv struct {
	Output any `expr:"output"`
	Input  any `expr:"input"`
	Vars   any `expr:"vars"`
	Nodes  any `expr:"nodes"`
}

// CompiledEdge is an edge whose condition has been compiled.
type CompiledEdge struct {
	Source    string
	Target    string
	Condition string

	program *vm.Program // nil when Condition is empty
}

// compileCondition compiles src once so that evaluation never re-parses
// and syntax errors surface at definition time.
func compileCondition(src string) (prog *vm.Program, err error) {
	if len(src) > maxConditionLen {
		return nil, fmt.Errorf("must be at most %d characters", maxConditionLen)
	}
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("must not be blank (omit it for an unconditional edge)")
	}
	defer func() {
		if r := recover(); r != nil {
			prog, err = nil, fmt.Errorf("cannot compile: %v", r)
		}
	}()
	prog, err = expr.Compile(src, expr.Env(conditionEnv{}), expr.AsBool())
	if err != nil {
		// expr errors carry a multi-line source excerpt; the first line
		// ("unknown name foo (1:1)") is what belongs in a FieldError.
		msg, _, _ := strings.Cut(err.Error(), "\n")
		return nil, errors.New(msg)
	}
	return prog, nil
}

// Eval evaluates the condition (true when empty) against env with keys
// "output" (the source node's output), "input" (the execution input),
// "vars" and "nodes" (node id -> map{"output": ...}). Absent or nil entries
// are treated as empty objects, so a missing key evaluates to nil rather
// than failing; json.Number values are converted to int64/float64 so that
// numeric comparisons work on outputs decoded with UseNumber. Runtime
// errors are returned, never panicked.
func (e *CompiledEdge) Eval(env map[string]any) (ok bool, err error) {
	if e == nil {
		return false, errors.New("nil edge")
	}
	prog := e.program
	if prog == nil {
		if e.Condition == "" {
			return true, nil
		}
		// Hand-built edge: compile on demand rather than failing.
		if prog, err = compileCondition(e.Condition); err != nil {
			return false, fmt.Errorf("condition %q: %w", e.Condition, err)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			ok, err = false, fmt.Errorf("condition %q: %v", e.Condition, r)
		}
	}()
	cenv := conditionEnv{
		Output: envValue(env, "output"),
		Input:  envValue(env, "input"),
		Vars:   envValue(env, "vars"),
		Nodes:  envValue(env, "nodes"),
	}
	out, err := expr.Run(prog, cenv)
	if err != nil {
		msg, _, _ := strings.Cut(err.Error(), "\n")
		return false, fmt.Errorf("condition %q: %s", e.Condition, msg)
	}
	b, isBool := out.(bool)
	if !isBool {
		return false, fmt.Errorf("condition %q: result is %T, not a boolean", e.Condition, out)
	}
	return b, nil
}

func envValue(env map[string]any, key string) any {
	v := env[key]
	if v == nil {
		return map[string]any{}
	}
	return normalizeNumbers(v)
}

// normalizeNumbers returns v with json.Number values replaced by int64 (or
// float64 when not integral). It copies only containers, never mutating
// the caller's data.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		if f, err := strconv.ParseFloat(string(x), 64); err == nil {
			return f
		}
		return string(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalizeNumbers(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeNumbers(e)
		}
		return out
	}
	return v
}
