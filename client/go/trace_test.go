// SPDX-License-Identifier: Apache-2.0

// trace_test.go — the local state machine replays the shared trace
// proto/traces/state-machine.json (generated from cbd), every expectation
// checked, as tests/check_trace.c does for the C core.

package cbdclient

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

type traceStep struct {
	Now        int64          `json:"now"`
	Op         string         `json:"op"`
	State      string         `json:"state"`
	DurationMs *int64         `json:"duration_ms"`
	Expect     map[string]any `json:"expect"`
}

type traceCase struct {
	Name   string      `json:"name"`
	Policy Ctx         `json:"policy"`
	Steps  []traceStep `json:"steps"`
}

func tracePath() string {
	if src := os.Getenv("CBD_SRCDIR"); src != "" {
		return filepath.Join(src, "proto", "traces", "state-machine.json")
	}
	return filepath.Join("..", "..", "proto", "traces", "state-machine.json")
}

func TestTraceReplay(t *testing.T) {
	data, err := os.ReadFile(tracePath())
	if err != nil {
		t.Fatalf("reading the trace: %v", err)
	}
	var trace struct {
		Format string      `json:"format"`
		Cases  []traceCase `json:"cases"`
	}
	dec := json.NewDecoder(bytesReader(data))
	dec.UseNumber()
	if err := dec.Decode(&trace); err != nil {
		t.Fatal(err)
	}
	if trace.Format != "cbd-trace" || len(trace.Cases) == 0 {
		t.Fatalf("not a cbd trace: format %q, %d cases", trace.Format, len(trace.Cases))
	}
	checked := 0
	for _, tc := range trace.Cases {
		p, err := PolicyFromCtx(tc.Policy)
		if err != nil {
			t.Fatalf("%s: %v", tc.Name, err)
		}
		s := NewLocalStore()
		for i, st := range tc.Steps {
			var got map[string]any
			dur := int64(-1)
			if st.DurationMs != nil {
				dur = *st.DurationMs
			}
			var snap Snapshot
			switch st.Op {
			case "success", "failure", "ignore":
				o := map[string]Outcome{"success": Success, "failure": Failure, "ignore": Ignore}[st.Op]
				snap = s.Record("c", o, p, st.Now, dur, "")
			case "allow":
				a := s.Allow("c", p, st.Now)
				if a.Permit != "" {
					s.ReleaseSlot("c", a.Permit)
				}
				got = map[string]any{"allowed": a.Allowed, "state": a.State, "retry_after_ms": a.RetryAfterMs}
			case "force":
				snap, err = s.SetState("c", st.State, p, st.Now)
				if err != nil {
					t.Fatalf("%s step %d: %v", tc.Name, i, err)
				}
			default:
				t.Fatalf("%s step %d: unknown op %q", tc.Name, i, st.Op)
			}
			if got == nil {
				got = map[string]any{"state": snap.State, "failure_count": snap.FailureCount,
					"success_count": snap.SuccessCount, "last_failure_at": snap.LastFailureAt,
					"opened_at": snap.OpenedAt, "current_break_ms": snap.CurrentBreakMs}
				if snap.Window != nil {
					got["window"] = map[string]any{"calls": snap.Window.Calls,
						"failures": snap.Window.Failures, "slow": snap.Window.Slow}
				}
			}
			for key, want := range st.Expect {
				checked++
				if !sameJSON(want, got[key]) {
					t.Errorf("%s step %d (%s at %d): %s = %s, want %s", tc.Name, i, st.Op, st.Now,
						key, jsonText(got[key]), jsonText(want))
				}
			}
		}
	}
	t.Logf("%d cases, %d expectations checked", len(trace.Cases), checked)
}
