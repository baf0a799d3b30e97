package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Fingerprint identifies what an operation does: the SHA-256 of the
// canonical JSON of the arguments that define it. Two calls with the same
// key must have the same fingerprint; a different one means the key was
// reused for a different operation.
type Fingerprint [32]byte

// String returns the fingerprint in hex.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// FingerprintOf computes the fingerprint of a tool call's arguments, as
// decoded once with numbers kept exact (json.Decoder.UseNumber: objects
// as map[string]any, arrays as []any, numbers as json.Number). fields
// lists the top-level arguments that define the operation (nil means all
// of them); skip names one to leave out even then, such as the
// idempotency key itself, which never counts. Canonical JSON sorts object
// keys at every depth and writes every number in one exact form (1, 1.0
// and 1e0 are the same), so formatting never changes a fingerprint; a
// field listed but absent counts as absent, which differs from null. A
// number decoded as float64 is refused: its exact text is already lost.
func FingerprintOf(args map[string]any, fields []string, skip string) (Fingerprint, error) {
	picked := make(map[string]any, len(args))
	for k, v := range args {
		if k == skip || (fields != nil && !slices.Contains(fields, k)) {
			continue
		}
		picked[k] = v
	}
	var b bytes.Buffer
	if err := canonical(&b, picked); err != nil {
		return Fingerprint{}, err
	}
	return sha256.Sum256(b.Bytes()), nil
}

func canonical(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case string:
		enc, _ := json.Marshal(x)
		b.Write(enc)
	case json.Number:
		b.WriteString(canonicalNumber(string(x)))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := canonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			enc, _ := json.Marshal(k)
			b.Write(enc)
			b.WriteByte(':')
			if err := canonical(b, x[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("ledger: cannot fingerprint %T", v)
	}
	return nil
}

// canonicalNumber writes a JSON number exactly, in one form for every
// spelling of its value: significant digits with no leading or trailing
// zeros, then a decimal exponent. 1, 1.0, 10e-1 and 0.1e1 are all "1";
// 12.50 is "125e-1". Converting through float64 would merge numbers that
// differ beyond its precision.
func canonicalNumber(n string) string {
	sign := ""
	if strings.HasPrefix(n, "-") {
		sign, n = "-", n[1:]
	}
	exp := 0
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(n[i+1:], "+"))
		if err != nil || e > 1<<30 || e < -(1<<30) {
			return sign + n // absurd exponent: keep the spelling
		}
		exp, n = e, n[:i]
	}
	digits := n
	if i := strings.IndexByte(n, '.'); i >= 0 {
		digits = n[:i] + n[i+1:]
		exp -= len(n) - i - 1
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0"
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	if exp == 0 {
		return sign + trimmed
	}
	return sign + trimmed + "e" + strconv.Itoa(exp)
}
