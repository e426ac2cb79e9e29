package toolschema

import (
	"github.com/toolsentry/toolsentry/guards"

	"fmt"
	"math"
	"math/bits"
	"strings"
)

// TypeSet is a set of JSON Schema primitive types. The empty set means "no
// type constraint": every value is allowed.
type TypeSet uint8

// The JSON Schema primitive types.
const (
	TypeNull TypeSet = 1 << iota
	TypeBoolean
	TypeObject
	TypeArray
	TypeNumber
	TypeInteger
	TypeString
)

// TypeAny is every type; a schema without "type" allows it.
const TypeAny TypeSet = TypeNull | TypeBoolean | TypeObject | TypeArray | TypeNumber | TypeInteger | TypeString

var typeNames = [...]string{"null", "boolean", "object", "array", "number", "integer", "string"}

// ParseType returns the TypeSet of one JSON Schema type name.
func ParseType(name string) (TypeSet, error) {
	for i, n := range typeNames {
		if n == name {
			return 1 << i, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown JSON Schema type %q", guards.ErrInvalid, name)
}

// Values returns the set of values the types admit, with number including
// integer and the empty set meaning any value.
func (t TypeSet) Values() TypeSet {
	if t == 0 {
		return TypeAny
	}
	if t&TypeNumber != 0 {
		t |= TypeInteger
	}
	return t
}

// Accepts reports whether every value of type sent is accepted by t: a
// reader or receiver typed t can take what a writer typed sent produces.
// integer is a subset of number; the empty set (no constraint) accepts all.
func (t TypeSet) Accepts(sent TypeSet) bool {
	return sent.Values()&^t.Values() == 0
}

// Len is the number of type names in the set.
func (t TypeSet) Len() int { return bits.OnesCount8(uint8(t)) }

// Names returns the type names in a fixed order.
func (t TypeSet) Names() []string {
	var out []string
	for i, n := range typeNames {
		if t&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// String is "any" for the empty set, else the names joined by "|".
func (t TypeSet) String() string {
	if t == 0 {
		return "any"
	}
	return strings.Join(t.Names(), "|")
}

// EnumTypes is the set of JSON types of decoded enum values: an integral
// number is an integer, any other number a number (integer included).
func EnumTypes(values []any) TypeSet {
	var t TypeSet
	for _, v := range values {
		switch x := v.(type) {
		case nil:
			t |= TypeNull
		case bool:
			t |= TypeBoolean
		case string:
			t |= TypeString
		case map[string]any:
			t |= TypeObject
		case []any:
			t |= TypeArray
		case float64:
			if x == math.Trunc(x) {
				t |= TypeInteger
			} else {
				t |= TypeNumber | TypeInteger
			}
		default: // another representation of a number
			t |= TypeNumber | TypeInteger
		}
	}
	return t
}
