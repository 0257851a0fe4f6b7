// SPDX-License-Identifier: Apache-2.0

package dockerlog

import (
	"testing"
	"time"
)

func Test_Parse_splits_docker_timestamps(t *testing.T) {
	l := Parse("nf0", "2026-11-23T23:40:01.123456789Z keel-nf: port vf0 up")
	if l.Text != "keel-nf: port vf0 up" || l.Container != "nf0" || !l.Time.Equal(time.Date(2026, 11, 23, 23, 40, 1, 123456789, time.UTC)) {
		t.Fatalf("%+v", l)
	}
	if l := Parse("nf0", "no timestamp here"); l.Text != "no timestamp here" {
		t.Fatalf("%+v", l)
	}
}
