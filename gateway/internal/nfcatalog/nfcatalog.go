// SPDX-License-Identifier: Apache-2.0

// Package nfcatalog reads the NF catalogue keel-nf exports (`keel-nf --list --json`: each NF's
// name, argument schemas and state, declared next to the NF with KEEL_NF_ARGS and
// KEEL_NF_STATE; the placer checks
// chains' arguments against it) and turns an NF's arguments into the keel-nf configuration it
// runs with, checked by the NF's own Init (`keel-nf --check`).
package nfcatalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"time"
)

// Arg is one argument schema; `keel-nf --help` documents the format.
type Arg struct {
	Name     string          `json:"name,omitempty"`
	Type     string          `json:"type"`
	Required bool            `json:"required,omitempty"`
	Default  json.RawMessage `json:"default,omitempty"`
	Doc      string          `json:"doc,omitempty"`
	Minimum  *int64          `json:"minimum,omitempty"`
	Maximum  *int64          `json:"maximum,omitempty"`
	Enum     []string        `json:"enum,omitempty"`
	Bytes    int             `json:"bytes,omitempty"`
	Items    *Arg            `json:"items,omitempty"`
	MinItems *int            `json:"min_items,omitempty"`
	MaxItems *int            `json:"max_items,omitempty"`
	Fields   []Arg           `json:"fields,omitempty"`
}

// NF is one catalogue entry.
type NF struct {
	Name       string `json:"name"`
	Help       string `json:"help"`
	Args       []Arg  `json:"args"`
	LoadedFrom string `json:"loaded_from,omitempty"` // set for a tenant's NF (keel-nf --load)
	// State is what state the NF keeps (KEEL_NF_STATE); nil: per-flow, as keel-nf assumes of an
	// NF that declares nothing.
	State *State `json:"state,omitempty"`
}

// State says whether an NF's flows can move to another instance of its chain with their state
// (issue 37): scope "per-flow" (they can) or "global" (state shared by flows: they never move),
// and with PerFlowIf, a global NF that is per-flow when each named argument has that value.
type State struct {
	Scope     string                     `json:"scope"`
	Doc       string                     `json:"doc,omitempty"`
	PerFlowIf map[string]json.RawMessage `json:"per_flow_if,omitempty"`
}

// Movable reports whether the NF's flows can move when it runs with config (its keel-nf
// configuration, JSON, as Config returns it); keel-nf's StateMovable decides alike.
func (nf *NF) Movable(config string) (bool, error) {
	if nf.State == nil || nf.State.Scope == "per-flow" {
		return true, nil
	}
	if nf.State.Scope != "global" {
		return false, fmt.Errorf("NF %s: state scope %q is neither per-flow nor global", nf.Name, nf.State.Scope)
	}
	if len(nf.State.PerFlowIf) == 0 {
		return false, nil
	}
	args := map[string]json.RawMessage{}
	if strings.TrimSpace(config) != "" {
		if err := json.Unmarshal([]byte(config), &args); err != nil {
			return false, fmt.Errorf("NF %s: configuration is not a JSON object: %w", nf.Name, err)
		}
	}
	for name, want := range nf.State.PerFlowIf {
		have, ok := args[name]
		if !ok {
			for _, a := range nf.Args {
				if a.Name == name {
					have, ok = a.Default, a.Default != nil
				}
			}
		}
		if !ok || !sameJSON(have, want) {
			return false, nil
		}
	}
	return true, nil
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// Catalog is what `keel-nf --list --json` prints.
type Catalog struct {
	Version int  `json:"version"`
	NFs     []NF `json:"nfs"`
}

// Parse reads a catalogue.
func Parse(data []byte) (*Catalog, error) {
	var c Catalog
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("NF catalogue: %w", err)
	}
	if c.Version != 1 {
		return nil, fmt.Errorf("NF catalogue: version %d, expected 1", c.Version)
	}
	return &c, nil
}

// Lookup returns the NF named name (the catalogue's names are lower case), or nil.
func (c *Catalog) Lookup(name string) *NF {
	for i := range c.NFs {
		if c.NFs[i].Name == strings.ToLower(name) {
			return &c.NFs[i]
		}
	}
	return nil
}

// Loaded returns the NFs a --load'ed shared object added (a tenant image's own NFs).
func (c *Catalog) Loaded() []NF {
	var out []NF
	for _, nf := range c.NFs {
		if nf.LoadedFrom != "" {
			out = append(out, nf)
		}
	}
	return out
}

// checkTimeout bounds one keel-nf --list or --check run.
const checkTimeout = 30 * time.Second

// List runs `keelNF --list --json` and reads the catalogue it prints.
func List(ctx context.Context, keelNF string) (*Catalog, error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, keelNF, "--list", "--json")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list --json: %w: %s", keelNF, err, strings.TrimSpace(stderr.String()))
	}
	return Parse(out)
}

// ArgError is an NF argument that keel-nf would refuse.
type ArgError struct {
	NF      string // the NF's name in the chain
	Arg     string // the argument (top-level name); "" when the problem is not one argument's
	Problem string
}

func (e *ArgError) Error() string {
	if e.Arg == "" {
		return fmt.Sprintf("NF %s: %s", e.NF, e.Problem)
	}
	return fmt.Sprintf("NF %s: argument %s: %s", e.NF, e.Arg, e.Problem)
}

// Config is an NF's keel-nf configuration: its chain-language arguments as the placer's
// Parse returns them (NfNode.args_json), which the placer checked against this schema (names,
// types, ranges, required arguments: placer/keel_placer/catalog.py, the one copy of those
// rules); what only the NF's Init knows, keel-nf --check tells (Checker). instance names the
// NF in errors.
func (nf *NF) Config(instance, argsJSON string) (string, error) {
	args := map[string]any{}
	if strings.TrimSpace(argsJSON) != "" {
		d := json.NewDecoder(strings.NewReader(argsJSON))
		d.UseNumber()
		if err := d.Decode(&args); err != nil {
			return "", &ArgError{NF: instance, Problem: fmt.Sprintf("arguments are not a JSON object: %v", err)}
		}
	}
	out, err := json.Marshal(args)
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// Checker runs an NF's Init on a configuration, as keel-nf will when the NF starts.
type Checker interface {
	// Check returns an *ArgError naming instance and the argument Init refuses, nil if Init
	// accepts config, or another error if the check could not run.
	Check(ctx context.Context, instance, nf, config string) error
}

// SecretRef reports whether v is an argument written {"secret": NAME} (keel-nf --help:
// the value of faas-cli secret NAME, read by keel-nf when the NF starts) and its name.
func SecretRef(v any) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return "", false
	}
	name, ok := m["secret"].(string)
	return name, ok
}

// SecretRefs lists the secrets a keel-nf configuration (JSON) names, sorted, without repeats.
func SecretRefs(config string) ([]string, error) {
	var v any
	if config == "" {
		return nil, nil
	}
	if err := json.Unmarshal([]byte(config), &v); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	var walk func(any)
	walk = func(v any) {
		if name, ok := SecretRef(v); ok {
			set[name] = true
			return
		}
		switch t := v.(type) {
		case map[string]any:
			for _, x := range t {
				walk(x)
			}
		case []any:
			for _, x := range t {
				walk(x)
			}
		}
	}
	walk(v)
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// Local checks library NFs with a local keel-nf (`keel-nf --check --nf NF=CONFIG`).
type Local struct {
	KeelNF string
	// SecretsDir is where the gateway keeps faas-cli's secrets, one file each (keel-nf
	// --secrets): an argument {"secret": NAME} is checked with the secret's value.
	SecretsDir string
}

// Check runs keel-nf --check.
func (l *Local) Check(ctx context.Context, instance, nf, config string) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	var stderr bytes.Buffer
	args := []string{"--check", "--nf", nf + "=" + config}
	if l.SecretsDir != "" {
		args = append([]string{"--secrets", l.SecretsDir}, args...)
	}
	cmd := exec.CommandContext(ctx, l.KeelNF, args...)
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return checkResult(instance, nf, exit.ExitCode(), stderr.Bytes(), l.KeelNF)
	}
	if err != nil {
		return fmt.Errorf("%s --check: %w", l.KeelNF, err)
	}
	return nil
}

// Runner runs a container image once without a network (Docker: containers.Docker.RunOnce).
type Runner interface {
	RunOnce(ctx context.Context, image string, args []string) (stdout, stderr []byte, code int, err error)
}

// Image checks a tenant's NF by running its image (entrypoint keel-nf --load the NF):
// `docker run --rm --network none IMAGE --check --nf NF=CONFIG`.
type Image struct {
	Runner Runner
	Image  string
}

// Check runs the image's keel-nf --check.
func (i *Image) Check(ctx context.Context, instance, nf, config string) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	_, stderr, code, err := i.Runner.RunOnce(ctx, i.Image, []string{"--check", "--nf", nf + "=" + config})
	if err != nil {
		return err
	}
	return checkResult(instance, nf, code, stderr, i.Image)
}

// argError names the argument a path like "rules[0].dst_ip" starts with; the problem keeps
// the rest of the path.
func argError(instance, path, problem string) *ArgError {
	arg := path
	if i := strings.IndexAny(path, ".["); i >= 0 {
		arg = path[:i]
	}
	if path != arg {
		problem = path + ": " + problem
	}
	return &ArgError{NF: instance, Arg: arg, Problem: problem}
}

// checkResult reads keel-nf --check's exit status and message ("keel-nf: nat.external_ip: ...").
func checkResult(instance, nf string, code int, stderr []byte, what string) error {
	if code == 0 {
		return nil
	}
	msg := strings.TrimSpace(strings.SplitN(strings.TrimSpace(string(stderr)), "\n", 2)[0])
	msg = strings.TrimPrefix(msg, "keel-nf: ")
	if code != 2 {
		return fmt.Errorf("%s --check --nf %s: exit status %d: %s", what, nf, code, msg)
	}
	if rest, ok := strings.CutPrefix(msg, nf+"."); ok {
		if path, problem, ok := strings.Cut(rest, ": "); ok {
			return argError(instance, path, problem)
		}
	}
	return &ArgError{NF: instance, Problem: msg}
}

// Describe runs a tenant's packet-function image with --list --json and returns the NF it adds
// to keel-nf: the only one, or the one named like the function when the image adds several.
func Describe(ctx context.Context, r Runner, image, function string) (*NF, error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	out, stderr, code, err := r.RunOnce(ctx, image, []string{"--list", "--json"})
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("%s --list --json: exit status %d: %s", image, code, strings.TrimSpace(string(stderr)))
	}
	c, err := Parse(out)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", image, err)
	}
	return pick(c.Loaded(), image, function)
}

func pick(loaded []NF, image, function string) (*NF, error) {
	switch {
	case len(loaded) == 1:
		return &loaded[0], nil
	case len(loaded) == 0:
		return nil, fmt.Errorf("%s adds no NF to keel-nf (is it built from the packet-cpp template?)", image)
	}
	for i := range loaded {
		if loaded[i].Name == strings.ToLower(function) {
			return &loaded[i], nil
		}
	}
	names := make([]string, len(loaded))
	for i, nf := range loaded {
		names[i] = nf.Name
	}
	return nil, fmt.Errorf("%s adds NFs %s; name the function like one of them", image, strings.Join(names, ", "))
}

// FromAnnotation reads a packet function's catalogue entry from an annotation, for a gateway
// without a container engine: {"name": NF, "args": [...]} as `keel-nf --list --json` prints it.
func FromAnnotation(text string) (*NF, error) {
	var nf NF
	d := json.NewDecoder(strings.NewReader(text))
	d.DisallowUnknownFields()
	if err := d.Decode(&nf); err != nil {
		return nil, fmt.Errorf("not a catalogue entry {\"name\": NF, \"args\": [...]}: %w", err)
	}
	if nf.Name == "" {
		return nil, fmt.Errorf("not a catalogue entry: \"name\" is missing")
	}
	return &nf, nil
}
