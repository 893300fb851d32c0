// SPDX-License-Identifier: Apache-2.0

// errors.go — the errors of the client: cbd's refusals (carrying its error
// code and message), an unreachable or hung cbd (codes "unavailable" and
// "timeout"), and an open circuit (ErrCircuitOpen, with RetryAfter).

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

// CircuitOpenError is the breaker's refusal: the circuit is open (or
// half_open with no free trial slot); RetryAfter says when to try again.
type CircuitOpenError struct {
	Name       string
	State      string
	RetryAfter time.Duration
}

func (e *CircuitOpenError) Error() string {
	return fmt.Sprintf("circuit %q is %s: retry in %d ms", e.Name, e.State,
		e.RetryAfter.Milliseconds())
}

// Is makes errors.Is(err, ErrCircuitOpen) true.
func (e *CircuitOpenError) Is(target error) bool { return target == ErrCircuitOpen }
