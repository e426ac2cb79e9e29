package guards

import "errors"

// ErrInvalid is returned (wrapped, with the offending field named) when an
// input is well-formed JSON but has no meaning to a guard: an accuracy outside
// [0, 1], an unknown determinism, a missing or misspelt field.
var ErrInvalid = errors.New("invalid input")
