// SPDX-License-Identifier: Apache-2.0

package fnscale

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func Test_Parse_takes_OpenFaaS_defaults_and_each_label(t *testing.T) {
	s, err := Parse(nil, OpenFaaS())
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{Min: 1, Max: 20, Type: RPS, Target: 5, Proportion: 0.9, ZeroDuration: 15 * time.Minute, Factor: 20}
	if s != want {
		t.Fatalf("defaults: got %+v, want %+v", s, want)
	}
	s, err = Parse(map[string]string{LabelMin: "2", LabelMax: "4", LabelType: "capacity", LabelTarget: "10",
		LabelProportion: "0.5", LabelZero: "true", LabelZeroDuration: "90s", LabelFactor: "50"}, OpenFaaS())
	if err != nil {
		t.Fatal(err)
	}
	want = Spec{Min: 2, Max: 4, Type: Capacity, Target: 10, Proportion: 0.5, Zero: true, ZeroDuration: 90 * time.Second, Factor: 50}
	if s != want {
		t.Fatalf("labels: got %+v, want %+v", s, want)
	}
	// The type picks its default target; a min above the default max raises the max.
	if s, _ := Parse(map[string]string{LabelType: "cpu", LabelMin: "30"}, OpenFaaS()); s.Target != 500 || s.Min != 30 || s.Max != 30 {
		t.Fatalf("cpu default target / min above default max: %+v", s)
	}
}

func Test_Parse_refuses_bad_labels_naming_them(t *testing.T) {
	for labels, want := range map[[2]string]string{
		{LabelMin, "0"}:              "labels.com.openfaas.scale.min: \"0\": expected a whole number of replicas, at least 1 (to scale to zero",
		{LabelMax, "-1"}:             "labels.com.openfaas.scale.max",
		{LabelType, "memory"}:        "expected rps, capacity or cpu",
		{LabelTarget, "0"}:           "expected a positive load per replica (requests per second per replica)",
		{LabelProportion, "1.5"}:     "labels.com.openfaas.scale.target-proportion",
		{LabelZero, "yes please"}:    "expected true or false",
		{LabelZeroDuration, "15"}:    "expected a positive duration",
		{LabelFactor, "101"}:         "0 to 100",
		{LabelTarget, "+Inf"}:        "expected a positive load",
		{LabelZeroDuration, "-1m"}:   "expected a positive duration",
		{LabelProportion, "nothing"}: "in (0, 1]",
	} {
		_, err := Parse(map[string]string{labels[0]: labels[1]}, OpenFaaS())
		var le *Error
		if !errors.As(err, &le) || le.Label != labels[0] || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%q: got %v, want an error naming the label with %q", labels[0], labels[1], err, want)
		}
	}
	if _, err := Parse(map[string]string{LabelMin: "3", LabelMax: "2"}, OpenFaaS()); err == nil || !strings.Contains(err.Error(), "is above com.openfaas.scale.max=2") {
		t.Fatalf("min above max: %v", err)
	}
}

func Test_Desired_is_ceil_of_load_over_target_times_proportion_within_bounds(t *testing.T) {
	s := Spec{Min: 1, Max: 2, Type: RPS, Target: 5, Proportion: 0.9}
	for load, want := range map[float64]uint64{0: 1, 4.5: 1, 4.6: 2, 10: 2, 1000: 2} {
		if got := s.Desired(load); got != want {
			t.Errorf("load %v: got %d, want %d", load, got, want)
		}
	}
	s.Max = 20
	if got := s.Desired(100); got != 20 { // ceil(100/4.5) = 23, capped at 20
		t.Fatalf("load 100: got %d", got)
	}
}

func Test_Alert_steps_by_factor_of_max_as_OpenFaaS_CE(t *testing.T) {
	s := Spec{Min: 1, Max: 20, Factor: 20}
	if got := s.Alert("firing", 1); got != 5 {
		t.Fatalf("firing at 1: got %d, want 1 + 20%% of 20 = 5", got)
	}
	if got := s.Alert("firing", 18); got != 20 {
		t.Fatalf("firing at 18: got %d, want the max 20", got)
	}
	if got := s.Alert("resolved", 17); got != 1 {
		t.Fatalf("resolved: got %d, want the min", got)
	}
	if got := (Spec{Min: 1, Max: 2, Factor: 20}).Alert("firing", 1); got != 2 {
		t.Fatalf("small max: a firing alert adds at least one replica, got %d", got)
	}
	if got := (Spec{Min: 1, Max: 20, Factor: 0}).Alert("firing", 3); got != 3 {
		t.Fatalf("factor 0 must not scale, got %d", got)
	}
	if got := (Spec{Min: 2, Max: 2, Factor: 20}).Alert("resolved", 2); got != 2 {
		t.Fatalf("fixed spec must not scale, got %d", got)
	}
}

func Test_Stabilizer_scales_up_at_once_and_down_after_the_window(t *testing.T) {
	st := Stabilizer{Window: 30 * time.Second}
	t0 := time.Unix(1000, 0)
	if got := st.Next(t0, 1); got != 1 {
		t.Fatal(got)
	}
	if got := st.Next(t0.Add(time.Second), 3); got != 3 {
		t.Fatalf("scale-up must be immediate, got %d", got)
	}
	if got := st.Next(t0.Add(20*time.Second), 1); got != 3 {
		t.Fatalf("within the window the highest stays, got %d", got)
	}
	if got := st.Next(t0.Add(32*time.Second), 1); got != 1 {
		t.Fatalf("after the window the lower applies, got %d", got)
	}
	st.Reset()
	if got := st.Next(t0.Add(33*time.Second), 0); got != 0 {
		t.Fatalf("after Reset only new recommendations count, got %d", got)
	}
}
