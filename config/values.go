package config

import (
	"fmt"
	"math"
	"math/big"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// The helpers below decode one attribute each. A nil attribute (absent from
// the block) leaves *dst untouched, and so does a null or invalid value: that
// is what lets a block be decoded over an already-filled struct to inherit
// every field it does not set. Problems are recorded on the decoder, pointing
// at the attribute's value.

// value evaluates a and converts it to ty. The config has no variables or
// functions: a nil EvalContext turns any reference into a positioned error.
func (d *decoder) value(a *hcl.Attribute, ty cty.Type) (cty.Value, bool) {
	if a == nil {
		return cty.NilVal, false
	}
	v, diags := a.Expr.Value(nil)
	d.diags = append(d.diags, diags...)
	if diags.HasErrors() || v.IsNull() {
		return cty.NilVal, false
	}
	v, err := convert.Convert(v, ty)
	if err != nil {
		d.errorf(a.Expr.Range(), "Incorrect attribute value type",
			"Inappropriate value for attribute %q: %s.", a.Name, err)
		return cty.NilVal, false
	}
	return v, true
}

func (d *decoder) text(a *hcl.Attribute) (string, bool) {
	v, ok := d.value(a, cty.String)
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

func (d *decoder) str(a *hcl.Attribute, dst *string) {
	if s, ok := d.text(a); ok {
		*dst = s
	}
}

func (d *decoder) oneOf(a *hcl.Attribute, dst *string, allowed ...string) {
	oneOf(d, a, dst, allowed...)
}

// oneOf decodes a into a string type that takes one of allowed values.
func oneOf[T ~string](d *decoder, a *hcl.Attribute, dst *T, allowed ...T) {
	s, ok := d.text(a)
	if !ok {
		return
	}
	if !slices.Contains(allowed, T(s)) {
		names := make([]string, len(allowed))
		for i, v := range allowed {
			names[i] = string(v)
		}
		d.errorf(a.Expr.Range(), "Invalid value", "%s must be one of %s, not %q.", a.Name, quoteAll(names), s)
		return
	}
	*dst = T(s)
}

func (d *decoder) boolean(a *hcl.Attribute, dst *bool) {
	if v, ok := d.value(a, cty.Bool); ok {
		*dst = v.True()
	}
}

// integer decodes a whole number within [lo, hi].
func (d *decoder) integer(a *hcl.Attribute, dst *int, lo, hi int) {
	v, ok := d.value(a, cty.Number)
	if !ok {
		return
	}
	f := v.AsBigFloat()
	i, acc := f.Int64()
	switch {
	case !f.IsInt():
		d.errorf(a.Expr.Range(), "Invalid value", "%s must be a whole number, not %s.", a.Name, f.Text('g', -1))
	case acc != big.Exact || i < math.MinInt || i > math.MaxInt:
		d.errorf(a.Expr.Range(), "Invalid value", "%s is too large.", a.Name)
	case int(i) < lo:
		d.errorf(a.Expr.Range(), "Invalid value", "%s must be at least %d, not %d.", a.Name, lo, i)
	case int(i) > hi:
		d.errorf(a.Expr.Range(), "Invalid value", "%s must be at most %d, not %d.", a.Name, hi, i)
	default:
		*dst = int(i)
	}
}

// multiplier decodes a growth factor: below 1 a delay would shrink instead.
func (d *decoder) multiplier(a *hcl.Attribute, dst *float64) {
	v, ok := d.value(a, cty.Number)
	if !ok {
		return
	}
	f, _ := v.AsBigFloat().Float64()
	switch {
	case math.IsInf(f, 0):
		d.errorf(a.Expr.Range(), "Invalid value", "%s is too large.", a.Name)
	case f < 1:
		d.errorf(a.Expr.Range(), "Invalid multiplier", "%s must be at least 1, not %g.", a.Name, f)
	default:
		*dst = f
	}
}

// durationShape matches what time.ParseDuration reads: a string of that
// shape that it refuses is too long for a time.Duration.
var durationShape = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`).MatchString

// duration decodes a Go duration string ("250ms", "1m", "24h"). Durations
// are never negative; positive also rules out zero where zero would mean a
// busy loop or an instant timeout.
func (d *decoder) duration(a *hcl.Attribute, dst *time.Duration, positive bool) {
	s, ok := d.text(a)
	if !ok {
		return
	}
	v, err := time.ParseDuration(s)
	switch {
	case err != nil && durationShape(s):
		d.errorf(a.Expr.Range(), "Invalid duration", "%s: %q is longer than the longest duration, about 292 years.", a.Name, s)
	case err != nil:
		d.errorf(a.Expr.Range(), "Invalid duration",
			`%s: %q is not a duration; write a number with a unit, like "250ms", "1m" or "24h".`, a.Name, s)
	case v < 0:
		d.errorf(a.Expr.Range(), "Invalid duration", "%s must not be negative, not %s.", a.Name, s)
	case v == 0 && positive:
		d.errorf(a.Expr.Range(), "Invalid duration", "%s must be greater than zero.", a.Name)
	default:
		*dst = v
	}
}

// size decodes a positive byte count: a whole number of bytes or a string
// such as "512KiB", "16MiB" or "1GB".
func (d *decoder) size(a *hcl.Attribute, dst *int64, max int64) {
	s, ok := d.text(a)
	if !ok {
		return
	}
	n, err := parseSize(s)
	if err != nil {
		d.errorf(a.Expr.Range(), "Invalid size", "%s: %v.", a.Name, err)
		return
	}
	if n > max {
		d.errorf(a.Expr.Range(), "Invalid size", "%s: %s is over the limit of %s.", a.Name, s, FormatSize(max))
		return
	}
	*dst = n
}

// FormatSize writes a size the way a config writes it: 256MiB, 4GiB.
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// address decodes a host:port TCP address (host may be empty: all
// interfaces).
func (d *decoder) address(a *hcl.Attribute, dst *string) {
	s, ok := d.text(a)
	if !ok || s == "" {
		return
	}
	host, port, err := net.SplitHostPort(s)
	n, perr := strconv.Atoi(port)
	switch {
	case err != nil:
		d.errorf(a.Expr.Range(), "Invalid address", "%s: %q is not host:port (%v).", a.Name, s, err)
	case perr != nil || n < 0 || n > 65535:
		d.errorf(a.Expr.Range(), "Invalid address", "%s: %q: the port must be a number from 0 to 65535.", a.Name, s)
	case strings.ContainsAny(host, " /"):
		d.errorf(a.Expr.Range(), "Invalid address", "%s: %q: %q is not a host name or IP address.", a.Name, s, host)
	default:
		*dst = s
	}
}

// LoopbackHost says whether host (of host:port) is a loopback address or
// localhost; "" (every interface) is not.
func LoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// strs decodes a list of strings and returns the range of each element, for
// errors about one entry; a list that is not written out as [...] gives each
// element the whole value's range.
func (d *decoder) strs(a *hcl.Attribute, dst *[]string) []hcl.Range {
	v, ok := d.value(a, cty.List(cty.String))
	if !ok {
		return nil
	}
	exprs, _ := hcl.ExprList(a.Expr)
	list := make([]string, 0, v.LengthInt())
	rngs := make([]hcl.Range, 0, v.LengthInt())
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		rng := a.Expr.Range()
		if len(exprs) == v.LengthInt() {
			rng = exprs[len(list)].Range()
		}
		if e.IsNull() {
			d.errorf(rng, "Invalid value", "%s must not contain null.", a.Name)
			return nil
		}
		list = append(list, e.AsString())
		rngs = append(rngs, rng)
	}
	*dst = list
	return rngs
}

// stringMap decodes an object of scalars, such as a plugin's config; numbers
// and bools become their canonical string form ("1.5", "true").
func (d *decoder) stringMap(a *hcl.Attribute, dst *map[string]string) {
	if a == nil {
		return
	}
	v, diags := a.Expr.Value(nil)
	d.diags = append(d.diags, diags...)
	if diags.HasErrors() || v.IsNull() {
		return
	}
	if ty := v.Type(); !ty.IsObjectType() && !ty.IsMapType() {
		d.errorf(a.Expr.Range(), "Incorrect attribute value type",
			`%s must be an object of strings, like { region = "eu-1" }.`, a.Name)
		return
	}
	m := make(map[string]string, v.LengthInt())
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		if !e.Type().IsPrimitiveType() || e.IsNull() {
			d.errorf(a.Expr.Range(), "Incorrect attribute value type",
				"%s.%s must be a string, number or bool.", a.Name, k.AsString())
			return
		}
		s, _ := convert.Convert(e, cty.String) // every non-null primitive converts
		m[k.AsString()] = s.AsString()
	}
	*dst = m
}

// hugeNumbers reports number literals beyond a float64's range. cty turns a
// number into a string digit by digit, so converting one like 1e400000000
// (also inside a template such as "${1e400000000}") would take minutes; no
// setting needs such a number, so they are rejected before any evaluation.
func hugeNumbers(body *hclsyntax.Body) hcl.Diagnostics {
	return hclsyntax.VisitAll(body, func(n hclsyntax.Node) hcl.Diagnostics {
		lit, ok := n.(*hclsyntax.LiteralValueExpr)
		if !ok || lit.Val.Type() != cty.Number {
			return nil
		}
		f := lit.Val.AsBigFloat()
		if exp := f.MantExp(nil); f.Sign() == 0 || exp >= -1074 && exp <= 1024 {
			return nil
		}
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Number out of range",
			Detail:   "This number is too large or too small for any setting.",
			Subject:  lit.SrcRange.Ptr(),
		}}
	})
}

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// parseSize parses a positive whole number of bytes with an optional unit;
// units are case-insensitive, KB/MB/GB/TB are powers of 1000 and
// KiB/MiB/GiB/TiB powers of 1024.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	digits := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		digits = len(s)
	}
	unit, ok := sizeUnits[strings.ToLower(strings.TrimSpace(s[digits:]))]
	n, err := strconv.ParseInt(s[:digits], 10, 64)
	switch {
	case digits == 0 || !ok:
		return 0, fmt.Errorf(`%q is not a size; write whole bytes or a number with a unit, like "512KiB", "16MiB" or "1GB"`, s)
	case err != nil || n > math.MaxInt64/unit:
		return 0, fmt.Errorf("%q is too large", s)
	case n == 0:
		return 0, fmt.Errorf("size must be greater than zero")
	}
	return n * unit, nil
}

func quoteAll(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
