// SPDX-License-Identifier: Apache-2.0

// Package nfcatalog reads the NF catalogue keel-nf exports (`keel-nf --list --json`: each NF's
// name and argument schemas, declared next to the NF with KEEL_NF_ARGS) and turns an NF's
// chain-language arguments into the keel-nf configuration it runs with, checked by the schema
// and by the NF's own Init (`keel-nf --check`).
package nfcatalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
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

// Config translates an NF's chain-language arguments (JSON, as the placer's Parse returns them
// in NfNode.args_json) into its keel-nf configuration, after checking every argument against
// the schema: known names, types, ranges, and every required argument present. instance names
// the NF in errors.
func (nf *NF) Config(instance, argsJSON string) (string, error) {
	args := map[string]any{}
	if strings.TrimSpace(argsJSON) != "" {
		d := json.NewDecoder(strings.NewReader(argsJSON))
		d.UseNumber()
		if err := d.Decode(&args); err != nil {
			return "", &ArgError{NF: instance, Problem: fmt.Sprintf("arguments are not a JSON object: %v", err)}
		}
	}
	if path, problem := checkFields(nf.Args, args, ""); problem != "" {
		return "", argError(instance, path, problem)
	}
	out, err := json.Marshal(args)
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// argError names the argument a path like "rules[0].dst_ip" starts with; the problem keeps
// the rest of the path.
func argError(instance, path, problem string) *ArgError {
	arg := topArg(path)
	if path != arg {
		problem = path + ": " + problem
	}
	return &ArgError{NF: instance, Arg: arg, Problem: problem}
}

// topArg is the argument a path like "rules[0].dst_ip" starts with.
func topArg(path string) string {
	if i := strings.IndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return path
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// checkFields returns the path of the first bad member of values and its problem, or "", "".
func checkFields(fields []Arg, values map[string]any, path string) (string, string) {
	byName := map[string]*Arg{}
	names := make([]string, 0, len(fields))
	for i := range fields {
		byName[fields[i].Name] = &fields[i]
		names = append(names, fields[i].Name)
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f, ok := byName[k]
		if !ok {
			accepted := strings.Join(names, ", ")
			if accepted == "" {
				accepted = "none"
			}
			return join(path, k), "unknown argument (accepted: " + accepted + ")"
		}
		if p, problem := checkValue(f, values[k], join(path, k)); problem != "" {
			return p, problem
		}
	}
	for _, f := range fields {
		if _, ok := values[f.Name]; f.Required && !ok {
			return join(path, f.Name), "missing (required: " + f.Doc + ")"
		}
	}
	return "", ""
}

var (
	macRe   = regexp.MustCompile(`^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$`)
	hexRe   = regexp.MustCompile(`^[0-9a-fA-F]*$`)
	portsRe = regexp.MustCompile(`^(\d+)-(\d+)$`)
)

func integer(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	return i, err == nil
}

func isIPv4(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4()
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case string:
		return "'" + x + "'"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case json.Number:
		return string(x)
	case []any:
		return "a list"
	case map[string]any:
		return "a dict"
	}
	return fmt.Sprint(v)
}

// checkValue returns the path of the bad (part of the) value and its problem, or "", "".
func checkValue(a *Arg, v any, path string) (string, string) {
	if _, ok := SecretRef(v); ok && a.Type != "array" && a.Type != "object" {
		return "", "" // the value is the secret's: keel-nf --check sees it (Local.SecretsDir)
	}
	bad := func(expect string) (string, string) { return path, "expected " + expect + ", got " + describe(v) }
	s, isString := v.(string)
	switch a.Type {
	case "integer":
		i, ok := integer(v)
		if !ok {
			return bad("an integer")
		}
		if (a.Minimum != nil && i < *a.Minimum) || (a.Maximum != nil && i > *a.Maximum) {
			return path, fmt.Sprintf("%d is out of range [%s, %s]", i, bound(a.Minimum), bound(a.Maximum))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return bad("True or False")
		}
	case "string":
		if !isString {
			return bad("a string")
		}
		if len(a.Enum) > 0 && !contains(a.Enum, s) {
			return bad(strings.Join(quote(a.Enum), " or "))
		}
	case "ipv4":
		if !isString || !isIPv4(s) {
			return bad("an IPv4 address 'A.B.C.D'")
		}
	case "cidr":
		addr, length, hasLen := strings.Cut(s, "/")
		n, err := strconv.Atoi(length)
		if !isString || !isIPv4(addr) || (hasLen && (err != nil || n < 0 || n > 32 || strings.HasPrefix(length, "+"))) {
			return bad("an IPv4 prefix 'A.B.C.D/N'")
		}
	case "proto":
		i, isInt := integer(v)
		if !(isString && contains([]string{"tcp", "udp", "icmp"}, s)) && !(isInt && i >= 0 && i <= 255) {
			return bad("'tcp', 'udp', 'icmp' or a protocol number 0-255")
		}
	case "mac":
		if !isString || !macRe.MatchString(s) {
			return bad("a MAC address 'aa:bb:cc:dd:ee:ff'")
		}
	case "hex":
		if !isString || len(s) != 2*a.Bytes || !hexRe.MatchString(s) {
			return bad(fmt.Sprintf("%d hex digits", 2*a.Bytes))
		}
	case "ports":
		i, isInt := integer(v)
		m := portsRe.FindStringSubmatch(s)
		okRange := false
		if isString && m != nil {
			lo, _ := strconv.Atoi(m[1])
			hi, _ := strconv.Atoi(m[2])
			okRange = lo <= hi && hi <= 65535
		}
		if !(isInt && i >= 0 && i <= 65535) && !okRange {
			return bad("a port 0-65535 or a range 'lo-hi'")
		}
	case "array":
		list, ok := v.([]any)
		if !ok {
			return bad("a list")
		}
		if (a.MinItems != nil && len(list) < *a.MinItems) || (a.MaxItems != nil && len(list) > *a.MaxItems) {
			return path, fmt.Sprintf("expected %s items, got %d", itemCount(a), len(list))
		}
		if a.Items != nil {
			for i, item := range list {
				if p, problem := checkValue(a.Items, item, fmt.Sprintf("%s[%d]", path, i)); problem != "" {
					return p, problem
				}
			}
		}
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return bad("a dict")
		}
		return checkFields(a.Fields, m, path)
	default:
		return path, fmt.Sprintf("the NF declares an unknown argument type %q", a.Type)
	}
	return "", ""
}

func bound(b *int64) string {
	if b == nil {
		return "any"
	}
	return strconv.FormatInt(*b, 10)
}

func itemCount(a *Arg) string {
	switch {
	case a.MinItems != nil && a.MaxItems != nil && *a.MinItems == *a.MaxItems:
		return strconv.Itoa(*a.MinItems)
	case a.MaxItems == nil:
		return fmt.Sprintf("at least %d", *a.MinItems)
	case a.MinItems == nil:
		return fmt.Sprintf("at most %d", *a.MaxItems)
	}
	return fmt.Sprintf("%d to %d", *a.MinItems, *a.MaxItems)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func quote(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = "'" + s + "'"
	}
	return out
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
