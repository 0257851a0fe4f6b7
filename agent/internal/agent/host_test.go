// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func fakeCPUCgroup(t *testing.T, root, docker string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cpu.rt_runtime_us"), []byte(root+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if docker != "" {
		if err := os.MkdirAll(filepath.Join(dir, "docker"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "docker", "cpu.rt_runtime_us"), []byte(docker+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func Test_EnsureRT_raises_Dockers_zero_to_the_roots_runtime(t *testing.T) {
	dir := fakeCPUCgroup(t, "950000", "0")
	if on, err := EnsureRT(dir, 10000); !on || err != nil {
		t.Fatalf("on %v err %v", on, err)
	}
	if got := readFile(t, filepath.Join(dir, "docker", "cpu.rt_runtime_us")); got != "950000" {
		t.Fatalf("docker cpu.rt_runtime_us = %q", got)
	}
}

func Test_EnsureRT_under_an_unthrottled_root_uses_950000(t *testing.T) {
	dir := fakeCPUCgroup(t, "-1", "0")
	if _, err := EnsureRT(dir, 10000); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "docker", "cpu.rt_runtime_us")); got != "950000" {
		t.Fatalf("docker cpu.rt_runtime_us = %q", got)
	}
}

func Test_EnsureRT_keeps_a_larger_value_and_refuses_zero(t *testing.T) {
	dir := fakeCPUCgroup(t, "950000", "960000")
	if _, err := EnsureRT(dir, 10000); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "docker", "cpu.rt_runtime_us")); got != "960000\n" {
		t.Fatalf("docker cpu.rt_runtime_us = %q", got)
	}
	if _, err := EnsureRT(dir, 0); err == nil {
		t.Fatal("--rt-runtime-us 0 accepted under RT group scheduling")
	}
}

func Test_EnsureRT_without_RT_group_scheduling_sets_nothing(t *testing.T) {
	if on, err := EnsureRT(t.TempDir(), 10000); on || err != nil {
		t.Fatalf("on %v err %v", on, err)
	}
}
