// Package strictjson decodes the small JSON files the product reads from
// its users besides the config (worker image specs, bundle specs): one
// object, no unknown field, nothing after it, and errors that name the
// file and the field.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Decode decodes the one JSON object in data into v; name says where
// data came from and starts every error.
func Decode(name string, data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fmt.Errorf("%s: %s: %s is not a JSON %s", name, te.Field, te.Value, te.Type)
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	if dec.More() {
		return fmt.Errorf("%s: data after the spec object", name)
	}
	return nil
}
