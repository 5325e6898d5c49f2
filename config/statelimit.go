package config

import (
	"fmt"

	"github.com/switchyard-router/switchyard"
)

// CheckStateWrite refuses a state write whose key or value is over its
// limit (switchyard.ErrStateLimit), as the router does and as every tool
// that runs a plugin must (router plugin test: a golden test once passed
// a write the router rejects).
func CheckStateWrite(key, value []byte) error {
	switch {
	case len(key) == 0 || len(key) > StateMaxKeyBytes:
		return fmt.Errorf("state key of %d bytes: keys have 1 to %d: %w", len(key), StateMaxKeyBytes, switchyard.ErrStateLimit)
	case len(value) > StateMaxValueBytes:
		return fmt.Errorf("state value of %d bytes, over the limit of %d: %w", len(value), StateMaxValueBytes, switchyard.ErrStateLimit)
	}
	return nil
}
