// SPDX-License-Identifier: Apache-2.0

// classify.go — what a call's outcome means for the breaker: Success,
// Failure or Ignore (PROTOCOL.md §14 item 8); the default classifier and
// the HTTP classifier: 5xx, 408, 429 and transport errors (net.Error
// timeouts included) are failures, the other statuses successes.

package cbdclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
)

// Outcome is a call's outcome as cbd's record takes it.
type Outcome int

// The three outcomes.
const (
	Success Outcome = iota
	Failure
	Ignore
)

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Ignore:
		return "ignore"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Classifier maps a call's error to its outcome. Breakers and retries never
// call it for a success (a nil error): a nil error is always a Success.
type Classifier func(error) Outcome

// DefaultClassify: nil is a success, a cancelled context says nothing about
// the dependency (Ignore), every other error is a failure.
func DefaultClassify(err error) Outcome {
	switch {
	case err == nil:
		return Success
	case errors.Is(err, context.Canceled):
		return Ignore
	}
	return Failure
}

// httpFailureStatuses are the statuses besides 5xx that say the dependency
// is unwell.
var httpFailureStatuses = map[int]bool{http.StatusRequestTimeout: true, http.StatusTooManyRequests: true}

// HTTPOutcome is the outcome of an HTTP status (libcbclient's
// cbc_http_outcome).
func HTTPOutcome(status int) Outcome {
	if status >= 500 || status < 100 || httpFailureStatuses[status] {
		return Failure
	}
	return Success
}

// HTTPStatusError carries an HTTP status as an error, so that a call
// returning it is classified by ClassifyHTTPError.
type HTTPStatusError struct{ StatusCode int }

func (e *HTTPStatusError) Error() string { return fmt.Sprintf("HTTP status %d", e.StatusCode) }

// ClassifyHTTP classifies one HTTP exchange: a transport error is a
// failure (a net.Error timeout too; a cancelled request is ignored), else
// the response's status decides.
func ClassifyHTTP(resp *http.Response, err error) Outcome {
	if err != nil {
		return ClassifyHTTPError(err)
	}
	if resp == nil {
		return Failure
	}
	return HTTPOutcome(resp.StatusCode)
}

// ClassifyHTTPError is a Classifier for calls that make HTTP requests: an
// *HTTPStatusError by its status, a net.Error timeout or any other error a
// failure, a cancelled context Ignore, nil a success.
func ClassifyHTTPError(err error) Outcome {
	if err == nil {
		return Success
	}
	var se *HTTPStatusError
	if errors.As(err, &se) {
		return HTTPOutcome(se.StatusCode)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return Failure
	}
	if errors.Is(err, context.Canceled) {
		return Ignore
	}
	return Failure
}
