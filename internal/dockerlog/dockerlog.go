// SPDX-License-Identifier: Apache-2.0

// Package dockerlog reads the logs of Docker containers as timestamped lines, for
// `faas-cli logs`: the gateway reads normal functions' replicas, keel-agent its NF containers.
package dockerlog

import (
	"bufio"
	"context"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// Line is one line a container wrote.
type Line struct {
	Container string    `json:"instance"` // the container's name
	Time      time.Time `json:"timestamp"`
	Text      string    `json:"text"`
}

// Options are what faas-cli logs asks for.
type Options struct {
	Since  *time.Time // nil: from the start
	Tail   int        // <= 0: every line
	Follow bool       // keep streaming until ctx ends
}

// Target is one container to read: its id and the name to report.
type Target struct{ ID, Name string }

// Source reads a container's log stream (Docker's client, or a fake in tests).
type Source interface {
	ContainerLogs(ctx context.Context, id string, o container.LogsOptions) (io.ReadCloser, error)
}

// Read streams the lines of every target on one channel, closed when all are read (or, with
// Follow, when ctx ends). A container that cannot be read is skipped.
func Read(ctx context.Context, cli Source, targets []Target, o Options) <-chan Line {
	opts := container.LogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true, Follow: o.Follow}
	if o.Since != nil {
		opts.Since = strconv.FormatInt(o.Since.Unix(), 10)
	}
	if o.Tail > 0 {
		opts.Tail = strconv.Itoa(o.Tail)
	}
	var streams []Stream
	for _, t := range targets {
		rc, err := cli.ContainerLogs(ctx, t.ID, opts)
		if err != nil {
			continue
		}
		pr, pw := io.Pipe()
		go func() {
			// Containers without a TTY multiplex stdout and stderr in one stream.
			_, err := stdcopy.StdCopy(pw, pw, rc)
			pw.CloseWithError(err)
		}()
		streams = append(streams, Stream{Name: t.Name, R: demuxed{pr, rc}})
	}
	return Merge(ctx, streams)
}

// demuxed is a container's demultiplexed log: closing it ends the copy and the stream.
type demuxed struct {
	*io.PipeReader
	raw io.Closer
}

func (d demuxed) Close() error {
	d.PipeReader.Close()
	return d.raw.Close()
}

// Stream is one opened log whose lines carry a timestamp (Parse), and the name to report.
type Stream struct {
	Name string
	R    io.ReadCloser
}

// Merge streams the lines of every stream on one channel, closed when all are read (or
// when ctx ends); each stream is closed once read. A trailing carriage return (a TTY's line
// end) is not part of a line. Docker's logs (Read) and Kubernetes' pods/log both end here.
func Merge(ctx context.Context, streams []Stream) <-chan Line {
	out := make(chan Line, 64)
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Add(1)
		go func(s Stream) {
			defer wg.Done()
			defer s.R.Close()
			sc := bufio.NewScanner(s.R)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				select {
				case out <- Parse(s.Name, strings.TrimRight(sc.Text(), "\r")):
				case <-ctx.Done():
					return
				}
			}
		}(s)
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
}

// Parse splits a line Docker wrote with Timestamps ("2026-11-23T23:40:01.123456789Z text").
func Parse(name, raw string) Line {
	ts, text, ok := strings.Cut(raw, " ")
	if t, err := time.Parse(time.RFC3339Nano, ts); ok && err == nil {
		return Line{Container: name, Time: t, Text: text}
	}
	return Line{Container: name, Time: time.Now().UTC(), Text: raw}
}
