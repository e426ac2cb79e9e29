package events

// The core attributes of CloudEvents 1.0, as indexes of attrSet.core.
const (
	attrSpecversion = iota
	attrID
	attrSource
	attrType
	attrSubject
	attrTime
	attrDataContentType
	attrDataSchema
	numCoreAttrs
)

// coreAttrNames are the names of the core attributes, by index.
var coreAttrNames = [numCoreAttrs]string{"specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema"}

// coreAttr returns the index of a core attribute, or -1 for an extension.
func coreAttr(name string) int {
	switch name {
	case "specversion":
		return attrSpecversion
	case "id":
		return attrID
	case "source":
		return attrSource
	case "type":
		return attrType
	case "subject":
		return attrSubject
	case "time":
		return attrTime
	case "datacontenttype":
		return attrDataContentType
	case "dataschema":
		return attrDataSchema
	}
	return -1
}

// attrSet is the attributes of a CloudEvent in canonical string form: the
// core attributes in fixed slots, the extensions in a list (a map costs
// more than the few attributes an event has).
type attrSet struct {
	core  [numCoreAttrs]string
	isSet uint16 // bit i: core[i] is set
	ext   []attr
	index map[string]int // positions in ext by name, once ext is long
}

type attr struct{ name, value string }

// extIndexAfter is the number of extensions beyond which attrSet keeps an
// index, so that many attributes cost no quadratic search.
const extIndexAfter = 16

func (a *attrSet) get(name string) (string, bool) {
	if i := coreAttr(name); i >= 0 {
		return a.core[i], a.isSet&(1<<i) != 0
	}
	if a.index != nil {
		if j, ok := a.index[name]; ok {
			return a.ext[j].value, true
		}
		return "", false
	}
	for _, x := range a.ext {
		if x.name == name {
			return x.value, true
		}
	}
	return "", false
}

// set sets an attribute, replacing any value it had.
func (a *attrSet) set(name, value string) {
	if i := coreAttr(name); i >= 0 {
		a.core[i] = value
		a.isSet |= 1 << i
		return
	}
	if a.index != nil {
		if j, ok := a.index[name]; ok {
			a.ext[j].value = value
			return
		}
	} else {
		for j := range a.ext {
			if a.ext[j].name == name {
				a.ext[j].value = value
				return
			}
		}
	}
	a.ext = append(a.ext, attr{name, value})
	switch {
	case a.index != nil:
		a.index[name] = len(a.ext) - 1
	case len(a.ext) > extIndexAfter:
		a.index = make(map[string]int, 2*len(a.ext))
		for j, x := range a.ext {
			a.index[x.name] = j
		}
	}
}
