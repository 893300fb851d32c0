// SPDX-License-Identifier: Apache-2.0

// errors.go — the errors of the client: cbd's refusals (carrying its error
// code and message), an unreachable or hung cbd (codes "unavailable" and
// "timeout"), and cbd's refusals of a call (every one matches ErrRefused
// and carries RetryAfter): an open circuit (ErrCircuitOpen), a full
// bulkhead (ErrBulkheadFull), a spent retry budget (ErrRetryBudget).

package cbdclient

import (
	"errors"
	"fmt"
	"time"
)

// Codes the client itself gives to an *Error (cbd's own codes are §4's).
const (
	CodeUnavailable = "unavailable" // cbd unreachable, closed the connection, garbled
	CodeTimeout     = "timeout"     // cbd did not connect or answer in time
)

// Error is cbd's refusal (ok: false: Code is cbd's, e.g. "bad_request",
// "forbidden", "capacity") or a failure to reach cbd (CodeUnavailable,
// CodeTimeout).
type Error struct {
	Op      string
	Code    string
	Message string
	cause   error // what errors.Is also matches (ErrListingLost)
}

// ErrListingLost matches (errors.Is) the *Error (code CodeUnavailable) of
// a listing whose connection was lost between two pages: a cursor lives on
// its connection only, so the listing is not restarted behind the caller.
var ErrListingLost = errors.New("cbd listing lost its connection")

func (e *Error) Error() string {
	if e.Op != "" {
		return fmt.Sprintf("cbd %s: %s: %s", e.Op, e.Code, e.Message)
	}
	return fmt.Sprintf("cbd: %s: %s", e.Code, e.Message)
}

// Unwrap is what the error stands for besides its code (nil, or
// ErrListingLost).
func (e *Error) Unwrap() error { return e.cause }

// Timeout is true for CodeTimeout (as net.Error's).
func (e *Error) Timeout() bool { return e.Code == CodeTimeout }

// Unavailable says whether err means cbd cannot serve now (fall back per
// the store policy) rather than an answer to return as it is.
func Unavailable(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case CodeUnavailable, CodeTimeout, "shutting_down", "internal":
		return true
	}
	return false
}

// ErrCircuitOpen matches (errors.Is) every *CircuitOpenError.
var ErrCircuitOpen = errors.New("circuit open")

// ErrRefused matches (errors.Is) every refusal of a call: a
// *CircuitOpenError, a *BulkheadFullError, a *RetryBudgetError.
var ErrRefused = errors.New("call refused")

// ErrBulkheadFull matches (errors.Is) every *BulkheadFullError.
var ErrBulkheadFull = errors.New("bulkhead full")

// ErrRetryBudget matches (errors.Is) every *RetryBudgetError.
var ErrRetryBudget = errors.New("retry budget spent")

// CircuitOpenError is the breaker's refusal: the circuit is open (or held
// open, or half_open with no free trial slot); RetryAfter says when to
// try again. Reason is cbd's (protocol 3: "open", "held",
// "half_open_full"; "" from an older cbd or the local fallback).
type CircuitOpenError struct {
	Name       string
	State      string
	RetryAfter time.Duration
	Reason     string
}

// BulkheadFullError: the circuit's bulkhead is full (protocol 3
// max_concurrent, reason "concurrency"): InFlight calls hold every ticket
// and none freed within the breaker's Wait. The breaker is not open
// (RetryAfter is 0).
type BulkheadFullError struct {
	Name       string
	State      string
	RetryAfter time.Duration
	InFlight   int64
}

func (e *BulkheadFullError) Error() string {
	return fmt.Sprintf("circuit %q: bulkhead full (%d calls in flight)", e.Name, e.InFlight)
}

// Is makes errors.Is(err, ErrBulkheadFull) and errors.Is(err, ErrRefused) true.
func (e *BulkheadFullError) Is(target error) bool {
	return target == ErrBulkheadFull || target == ErrRefused
}

// RetryBudgetError: a retry refused by the circuit's retry budget
// (protocol 3 retry_budget_percent, reason "retry_budget"); Retry stops
// at it. RetryAfter: when the budget has room again.
type RetryBudgetError struct {
	Name       string
	State      string
	RetryAfter time.Duration
}

func (e *RetryBudgetError) Error() string {
	return fmt.Sprintf("circuit %q: retry budget spent: retry in %d ms", e.Name,
		e.RetryAfter.Milliseconds())
}

// Is makes errors.Is(err, ErrRetryBudget) and errors.Is(err, ErrRefused) true.
func (e *RetryBudgetError) Is(target error) bool {
	return target == ErrRetryBudget || target == ErrRefused
}

// RetryAfter is when a refused call (errors.Is(err, ErrRefused)) may be
// tried again; false for any other error.
func RetryAfter(err error) (time.Duration, bool) {
	var o *CircuitOpenError
	var b *BulkheadFullError
	var r *RetryBudgetError
	switch {
	case errors.As(err, &o):
		return o.RetryAfter, true
	case errors.As(err, &b):
		return b.RetryAfter, true
	case errors.As(err, &r):
		return r.RetryAfter, true
	}
	return 0, false
}

// refusal is the error for an allow reply with allowed: false.
func refusal(name string, r *AllowReply) error {
	after := time.Duration(r.RetryAfterMs) * time.Millisecond
	switch r.Reason {
	case "concurrency":
		e := &BulkheadFullError{Name: name, State: r.State, RetryAfter: after}
		if r.InFlight != nil {
			e.InFlight = *r.InFlight
		}
		return e
	case "retry_budget":
		return &RetryBudgetError{Name: name, State: r.State, RetryAfter: after}
	}
	return &CircuitOpenError{Name: name, State: r.State, RetryAfter: after, Reason: r.Reason}
}

func (e *CircuitOpenError) Error() string {
	return fmt.Sprintf("circuit %q is %s: retry in %d ms", e.Name, e.State,
		e.RetryAfter.Milliseconds())
}

// Is makes errors.Is(err, ErrCircuitOpen) and errors.Is(err, ErrRefused) true.
func (e *CircuitOpenError) Is(target error) bool {
	return target == ErrCircuitOpen || target == ErrRefused
}
