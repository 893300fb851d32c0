// SPDX-License-Identifier: Apache-2.0

// retry.go — retries, backoff and timeouts around a breaker (issue 13's
// "Retries, backoff and timeouts"): a per-attempt timeout (the attempt's
// context carries its deadline), retries with exponential backoff (base,
// max, full jitter), RetryOn, hooks. The breaker is asked before every
// attempt and every attempt's outcome is reported to it (a bulkhead ticket
// goes back with it, whatever the attempt did); attempts after the first
// are marked retries (AcquireRetry: allow's "retry": true, counted against
// the circuit's retry budget); any refusal — an open circuit, a full
// bulkhead, a spent retry budget (*RetryBudgetError) — ends the retries at
// once. The clock, the sleep and the
// random source are injectable, so the tests run in virtual time. No
// goroutines are spawned.

package cbdclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"time"
)

// Defaults of Retry.
const (
	DefaultAttempts = 3
	DefaultBase     = 100 * time.Millisecond
	DefaultMax      = 10 * time.Second
)

// ErrAttemptTimeout matches (errors.Is) every *AttemptTimeoutError.
var ErrAttemptTimeout = errors.New("attempt timed out")

// AttemptTimeoutError: an attempt ran past the per-attempt timeout (Err is
// what the attempt returned, if anything).
type AttemptTimeoutError struct {
	Attempt int
	Limit   time.Duration
	Err     error
}

func (e *AttemptTimeoutError) Error() string {
	return fmt.Sprintf("attempt %d timed out after %d ms", e.Attempt, e.Limit.Milliseconds())
}

// Is makes errors.Is(err, ErrAttemptTimeout) true.
func (e *AttemptTimeoutError) Is(target error) bool { return target == ErrAttemptTimeout }

// Unwrap is the attempt's own error.
func (e *AttemptTimeoutError) Unwrap() error { return e.Err }

// Timeout is true (as net.Error's).
func (e *AttemptTimeoutError) Timeout() bool { return true }

// Hooks are called during a run (all optional).
type Hooks struct {
	// OnRetry: before sleeping delay ahead of attempt+1.
	OnRetry func(attempt int, err error, delay time.Duration)
	// OnTimeout: the attempt ran past its timeout.
	OnTimeout func(attempt int)
	// OnFailure: every failed attempt.
	OnFailure func(attempt int, err error)
	// OnCircuitOpen: the circuit opened during the run or refused an
	// attempt (the retries then end).
	OnCircuitOpen func(retryAfter time.Duration)
	// OnCircuitHalfOpen, OnCircuitClosed: the breaker was seen moving to
	// that state during the run.
	OnCircuitHalfOpen func()
	OnCircuitClosed   func()
}

// Retry runs a call with retries; zero values take the defaults.
type Retry struct {
	Breaker  *Breaker
	Attempts int           // most attempts in all (1: no retry)
	Base     time.Duration // the backoff before retry n is drawn from
	Max      time.Duration // [0, min(Max, Base*2^(n-1))] (full jitter)
	NoJitter bool          // exactly that bound
	// AttemptTimeout is the per-attempt timeout (0: none).
	AttemptTimeout time.Duration
	// RetryOn says whether an error is worth a retry (default: any; an
	// open circuit and a cancelled context never are).
	RetryOn  func(error) bool
	Hooks    Hooks
	Fallback func(ctx context.Context, err error) error
	// Now, Sleep and Rand (in [0, 1)) for virtual time.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	Rand  func() float64
}

func (r *Retry) attempts() int {
	if r.Attempts < 1 {
		return DefaultAttempts
	}
	return r.Attempts
}

// Delay is the backoff before retry number n (1, 2, ...).
func (r *Retry) Delay(n int) time.Duration {
	base, max := r.Base, r.Max
	if base <= 0 {
		base = DefaultBase
	}
	if max <= 0 {
		max = DefaultMax
	}
	limit := max
	if n-1 < 62 && base < max>>uint(n-1) {
		limit = base << uint(n-1)
	}
	if r.NoJitter {
		return limit
	}
	f := rand.Float64
	if r.Rand != nil {
		f = r.Rand
	}
	return time.Duration(f() * float64(limit))
}

func (r *Retry) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Retry) stateHooks(before, after string) {
	if before == after {
		return
	}
	switch after {
	case StateHalfOpen:
		if r.Hooks.OnCircuitHalfOpen != nil {
			r.Hooks.OnCircuitHalfOpen()
		}
	case StateClosed:
		if r.Hooks.OnCircuitClosed != nil {
			r.Hooks.OnCircuitClosed()
		}
	case StateOpen:
		if r.Hooks.OnCircuitOpen != nil {
			r.Hooks.OnCircuitOpen(r.Breaker.BreakInEffect())
		}
	}
}

func (r *Retry) retryable(err error) bool {
	if errors.Is(err, ErrRefused) || errors.Is(err, context.Canceled) {
		return false
	}
	if r.RetryOn != nil {
		return r.RetryOn(err)
	}
	return true
}

// Do runs fn with retries: nil on a success, else the last error (or the
// fallback's answer when the circuit refused an attempt).
func (r *Retry) Do(ctx context.Context, fn func(context.Context) error) error {
	sleep := r.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	var err error
	for attempt := 1; ; attempt++ {
		if cerr := ctx.Err(); cerr != nil {
			if err == nil {
				err = cerr
			}
			return err
		}
		err = r.attempt(ctx, attempt, fn)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrRefused) {
			// Any refusal ends the retries: an open circuit, a full
			// bulkhead, a spent retry budget (*RetryBudgetError).
			var open *CircuitOpenError
			if errors.As(err, &open) && r.Hooks.OnCircuitOpen != nil {
				r.Hooks.OnCircuitOpen(open.RetryAfter)
			}
			if r.Fallback != nil {
				return r.Fallback(ctx, err)
			}
			return err
		}
		if errors.Is(err, ErrAttemptTimeout) && r.Hooks.OnTimeout != nil {
			r.Hooks.OnTimeout(attempt)
		}
		if r.Hooks.OnFailure != nil {
			r.Hooks.OnFailure(attempt, err)
		}
		if attempt >= r.attempts() || !r.retryable(err) || ctx.Err() != nil {
			return err
		}
		delay := r.Delay(attempt)
		if r.Hooks.OnRetry != nil {
			r.Hooks.OnRetry(attempt, err, delay)
		}
		if serr := sleep(ctx, delay); serr != nil {
			return err
		}
	}
}

// attempt runs one attempt under the breaker (if any) and its timeout.
func (r *Retry) attempt(ctx context.Context, n int, fn func(context.Context) error) error {
	var permit *Permit
	if r.Breaker != nil {
		before := r.Breaker.State()
		acquire := r.Breaker.Acquire
		if n > 1 {
			acquire = r.Breaker.AcquireRetry // marked: the retry budget counts it
		}
		p, err := acquire(ctx)
		after := r.Breaker.State()
		if after != StateOpen {
			r.stateHooks(before, after)
		}
		if err != nil {
			return err
		}
		permit = p
	}
	actx, cancel := ctx, context.CancelFunc(func() {})
	if r.AttemptTimeout > 0 {
		actx, cancel = context.WithTimeout(ctx, r.AttemptTimeout)
	}
	defer cancel()
	started := r.now()
	done := false
	defer func() {
		if !done && permit != nil {
			_ = r.Breaker.Report(permit, Ignore, r.now().Sub(started)) // a panic
		}
	}()
	err := fn(actx)
	done = true
	elapsed := r.now().Sub(started)
	timedOut := r.AttemptTimeout > 0 && (elapsed >= r.AttemptTimeout ||
		(errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil))
	if timedOut {
		// Past its deadline: the attempt failed, a result is late.
		err = &AttemptTimeoutError{Attempt: n, Limit: r.AttemptTimeout, Err: err}
	}
	if permit != nil {
		o := Failure
		if !timedOut {
			o = r.Breaker.classify(err)
		}
		before := r.Breaker.State()
		_ = r.Breaker.Report(permit, o, elapsed)
		r.stateHooks(before, r.Breaker.State())
	}
	return err
}

// Retrying runs fn with r's retries and returns its value.
func Retrying[T any](ctx context.Context, r *Retry, fn func(context.Context) (T, error)) (T, error) {
	var out T
	err := r.Do(ctx, func(ctx context.Context) error {
		v, err := fn(ctx)
		out = v
		return err
	})
	return out, err
}
