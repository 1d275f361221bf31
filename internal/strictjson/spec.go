package strictjson

import (
	"errors"
	"fmt"
)

// Bad reports one problem of a document at a JSON path (field), as
// fmt.Sprintf(format, a...).
type Bad func(field, format string, a ...any)

// DecodeSpec is how every versioned spec is read: data decoded strictly
// (Decode) into a new T, its schema version (what version reads from it)
// checked against want, then check run to report the rest through bad.
// Every problem is reported, not the first one only, each as
// "name: field: problem", joined into one error.
func DecodeSpec[T any](name string, data []byte, want int, version func(*T) int, check func(s *T, bad Bad)) (*T, error) {
	var s T
	if err := Decode(name, data, &s); err != nil {
		return nil, err
	}
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %s", name, field, fmt.Sprintf(format, a...)))
	}
	if got := version(&s); got != want {
		bad("schemaVersion", "%d is not supported (want %d)", got, want)
	}
	check(&s, bad)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &s, nil
}
