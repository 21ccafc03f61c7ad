// SPDX-License-Identifier: Apache-2.0

package kvkey

// ErrorKind says what was wrong with a call: the identity or another argument.
type ErrorKind string

const (
	// IdentityErrorKind: an Identity (or a tenant secret) is invalid; Field
	// names the field as the C++ library does ("kv.num_kv_heads", "tenant",
	// "tenant_secret").
	IdentityErrorKind ErrorKind = "identity_error"
	// InputErrorKind: another argument is invalid (an extra key's range, a
	// malformed hex digest).
	InputErrorKind ErrorKind = "input_error"
)

// Error is the error every function of this package returns. Use errors.As to
// read its Kind and Field.
type Error struct {
	Kind  ErrorKind // identity_error or input_error
	Field string    // the dotted path of the offending field, when one is known
	Msg   string    // what is wrong, for people
}

// Error returns "kvkey.<kind>: <field>: <what is wrong>".
func (e *Error) Error() string {
	if e.Field == "" {
		return "kvkey." + string(e.Kind) + ": " + e.Msg
	}
	return "kvkey." + string(e.Kind) + ": " + e.Field + ": " + e.Msg
}

func identityError(field, msg string) error {
	return &Error{Kind: IdentityErrorKind, Field: field, Msg: msg}
}

func inputError(field, msg string) error { return &Error{Kind: InputErrorKind, Field: field, Msg: msg} }
