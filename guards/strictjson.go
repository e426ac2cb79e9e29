package guards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// DecodeStrict decodes one JSON value into v (a pointer to a struct) and
// rejects what encoding/json would accept silently: a field that v does not
// declare (matched exactly, not case-insensitively), a declared field that is
// missing (fields tagged omitempty are optional), null for a non-pointer
// field, a value of the wrong JSON type, a number that does not fit, and
// trailing data. Errors wrap ErrInvalid and name the field by its path, as in
// "composition.tools[1].accuracy: want number, got string".
func DecodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return fmt.Errorf("%w: not valid JSON: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: not valid JSON: data after the value", ErrInvalid)
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic("guards: DecodeStrict needs a non-nil pointer")
	}
	if err := checkTree(tree, rv.Type().Elem(), ""); err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// JSONKind names the JSON kind of a decoded value (null, boolean, number,
// string, array, object) as DecodeStrict's errors name it.
func JSONKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// FieldError is an ErrInvalid naming the field at path (JoinPath's form;
// "the value" when path is empty), as DecodeStrict reports one.
func FieldError(path, format string, args ...any) error {
	if path == "" {
		path = "the value"
	}
	return fmt.Errorf("%w: %s: %s", ErrInvalid, path, fmt.Sprintf(format, args...))
}

// JoinPath appends an object key to a FieldError path: "a" + "b" is "a.b".
func JoinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func checkTree(v any, t reflect.Type, path string) error {
	if t == rawMessageType || t.Kind() == reflect.Interface {
		return nil
	}
	if t.Kind() == reflect.Pointer {
		if v == nil {
			return nil
		}
		return checkTree(v, t.Elem(), path)
	}
	if v == nil {
		switch t.Kind() {
		case reflect.Slice, reflect.Map:
			return nil
		}
		return FieldError(path, "want %s, got null", wantKind(t))
	}
	switch t.Kind() {
	case reflect.String:
		if _, ok := v.(string); !ok {
			return FieldError(path, "want string, got %s", JSONKind(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return FieldError(path, "want boolean, got %s", JSONKind(v))
		}
	case reflect.Float64, reflect.Float32:
		n, ok := v.(json.Number)
		if !ok {
			return FieldError(path, "want number, got %s", JSONKind(v))
		}
		if _, err := strconv.ParseFloat(string(n), t.Bits()); err != nil {
			return FieldError(path, "number %s is out of range", n)
		}
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32:
		n, ok := v.(json.Number)
		if !ok {
			return FieldError(path, "want integer, got %s", JSONKind(v))
		}
		var err error
		if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
			_, err = strconv.ParseUint(string(n), 10, t.Bits())
		} else {
			_, err = strconv.ParseInt(string(n), 10, t.Bits())
		}
		if err != nil {
			return FieldError(path, "want an integer that fits %s, got %s", t.Kind(), n)
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return FieldError(path, "want array, got %s", JSONKind(v))
		}
		for i, e := range arr {
			if err := checkTree(e, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return FieldError(path, "want object, got %s", JSONKind(v))
		}
		for _, k := range SortedObjectKeys(obj) {
			if err := checkTree(obj[k], t.Elem(), JoinPath(path, k)); err != nil {
				return err
			}
		}
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return FieldError(path, "want object, got %s", JSONKind(v))
		}
		return checkStruct(obj, t, path)
	default:
		panic("guards: DecodeStrict: unsupported field type " + t.String())
	}
	return nil
}

func checkStruct(obj map[string]any, t reflect.Type, path string) error {
	type field struct {
		name     string
		optional bool
		typ      reflect.Type
	}
	fields := make([]field, 0, t.NumField())
	known := make(map[string]bool, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		known[name] = true
		optional := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		fields = append(fields, field{name, optional, f.Type})
	}
	// Unknown fields first: a misspelt field is reported as itself, not as
	// the missing field it was meant to be.
	for _, k := range SortedObjectKeys(obj) {
		if !known[k] {
			return FieldError(JoinPath(path, k), "unknown field (known: %s)", strings.Join(sortedKeys(known), ", "))
		}
	}
	for _, f := range fields {
		val, present := obj[f.name]
		if !present {
			if f.optional {
				continue
			}
			return FieldError(JoinPath(path, f.name), "missing")
		}
		if err := checkTree(val, f.typ, JoinPath(path, f.name)); err != nil {
			return err
		}
	}
	return nil
}

func wantKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Struct:
		return "object"
	}
	if t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64 {
		return "integer"
	}
	return t.Kind().String()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return SortedSet(out)
}

// SortedObjectKeys returns the keys of a decoded JSON object, sorted as
// SortedSet sorts.
func SortedObjectKeys(obj map[string]any) []string {
	out := make([]string, 0, len(obj))
	for k := range obj {
		out = append(out, k)
	}
	return SortedSet(out)
}
