package switchyard

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CheckTenant says whether t may name a tenant: a token's tenant, an
// X-Tenant header, a ?tenant= parameter, a tenant block's label. No
// control character: the data file's keys use 0 and 1 bytes as separators
// (storage.EventKey beside an inbox's keys).
func CheckTenant(t string) error {
	if t == "" || len(t) > 64 || !utf8.ValidString(t) || strings.ContainsFunc(t, unicode.IsControl) {
		return errors.New("up to 64 bytes of printable UTF-8")
	}
	return nil
}
