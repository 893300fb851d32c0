// SPDX-License-Identifier: Apache-2.0

// Package cbdtest starts a real cbd for the tests: the binary from
// $CBD_BINARY (else ../../build/src/cbd from client/go), on a socket in a
// temporary directory, stopped at the end; every wait bounded.
package cbdtest

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Bounded waits: cbd starting to answer, and stopping.
const (
	StartWait = 10 * time.Second
	StopWait  = 10 * time.Second
	pollEvery = 10 * time.Millisecond
)

// Daemon is one cbd on a private socket.
type Daemon struct {
	Dir    string
	Socket string
	Log    string
	args   []string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Binary is cbd's path, or "" when there is none.
func Binary() string {
	if b := os.Getenv("CBD_BINARY"); b != "" {
		return b
	}
	for _, guess := range []string{"../../build/src/cbd", "../../../../build/src/cbd"} {
		if _, err := os.Stat(guess); err == nil {
			p, _ := filepath.Abs(guess)
			return p
		}
	}
	return ""
}

// Start starts a cbd (config: a config file's text, or ""); the test is
// skipped when there is no binary. The daemon is not stopped by itself:
// call Cleanup (t.Cleanup does for StartT).
func Start(config string) (*Daemon, error) {
	bin := Binary()
	dir, err := os.MkdirTemp("", "cbd-go.")
	if err != nil {
		return nil, err
	}
	d := &Daemon{Dir: dir, Socket: filepath.Join(dir, "cbd.sock"), Log: filepath.Join(dir, "cbd.log")}
	d.args = []string{bin, "-s", d.Socket}
	if config != "" {
		conf := filepath.Join(dir, "cbd.conf")
		if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
			return nil, err
		}
		d.args = append(d.args, "-c", conf)
	}
	return d, d.Restart()
}

// StartT starts a cbd for one test, stopped when the test ends.
func StartT(t testing.TB, config string) *Daemon {
	t.Helper()
	if Binary() == "" {
		t.Skip("CBD_BINARY is not set")
	}
	d, err := Start(config)
	if err != nil {
		t.Fatalf("starting cbd: %v", err)
	}
	t.Cleanup(d.Cleanup)
	return d
}

func hello(socket string) bool {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("{\"op\":\"hello\"}\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.Contains(line, `"ok":true`)
}

// Restart starts the daemon again (after Kill or Stop).
func (d *Daemon) Restart() error {
	log, err := os.OpenFile(d.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	d.cmd = exec.Command(d.args[0], d.args[1:]...)
	d.cmd.Stderr = log
	if err := d.cmd.Start(); err != nil {
		return err
	}
	d.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(d.cmd, d.exited)
	deadline := time.Now().Add(StartWait)
	for !hello(d.Socket) {
		select {
		case <-d.exited:
			return &startError{d.logText()}
		default:
		}
		if time.Now().After(deadline) {
			d.Stop()
			return &startError{d.logText()}
		}
		time.Sleep(pollEvery)
	}
	return nil
}

type startError struct{ log string }

func (e *startError) Error() string { return "cbd did not start: " + e.log }

func (d *Daemon) logText() string {
	b, _ := os.ReadFile(d.Log)
	return string(b)
}

func (d *Daemon) running() bool {
	if d.cmd == nil {
		return false
	}
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

func (d *Daemon) wait() {
	select {
	case <-d.exited:
	case <-time.After(StopWait):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// Stop: SIGCONT (should it be stopped), SIGTERM, SIGKILL after the bounded wait.
func (d *Daemon) Stop() {
	if !d.running() {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGCONT)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait()
}

// Kill: SIGKILL, gone without a goodbye (the socket file stays).
func (d *Daemon) Kill() {
	if d.running() {
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// Pause sends SIGSTOP; Resume SIGCONT.
func (d *Daemon) Pause()  { _ = d.cmd.Process.Signal(syscall.SIGSTOP) }
func (d *Daemon) Resume() { _ = d.cmd.Process.Signal(syscall.SIGCONT) }

// Cleanup stops the daemon and removes its directory.
func (d *Daemon) Cleanup() {
	d.Stop()
	_ = os.RemoveAll(d.Dir)
}

// Reload sends SIGHUP: cbd reads its config file (Dir/cbd.conf) again.
func (d *Daemon) Reload() { _ = d.cmd.Process.Signal(syscall.SIGHUP) }
