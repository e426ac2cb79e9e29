package toolschema

// This file classifies a changed description or title, the text the model
// reads as instructions, without a model: deterministic rules over what
// the new text has that the old one did not. A wording edit (a typo,
// punctuation, a rephrasing) is reported for review and halts nobody; text
// that instructs the model, refers to other tools, secrets or files, adds
// links or addresses, hides characters or a blob, or grows far longer is a
// security change. The rules are listed in `toolsentry diff --help`.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DescriptionClass is what a description or title change is.
type DescriptionClass string

// The classes of description change.
const (
	// DescriptionReworded is a wording edit: nothing the rules look for
	// was added.
	DescriptionReworded DescriptionClass = "reworded"
	// DescriptionMeaning is a wording edit that changes numbers, units or
	// negations ("seconds" to "milliseconds"): the field may now mean
	// something else.
	DescriptionMeaning DescriptionClass = "meaning"
	// DescriptionInstructions is text addressed to the model: instructions,
	// concealment, references to other tools, secrets or files, new links
	// or addresses, hidden characters, blobs, or a text grown far longer.
	DescriptionInstructions DescriptionClass = "instructions"
)

// DescriptionFinding is one thing the rules found in a new text.
type DescriptionFinding struct {
	Rule string // the rule's name: "instruction", "concealment", "tool", "secret", "file", "url", "email", "hidden", "blob", "growth"
	Text string // what matched, shortened
}

func (f DescriptionFinding) String() string {
	label := descriptionRuleLabels[f.Rule]
	if f.Text == "" {
		return label
	}
	return fmt.Sprintf("%s (%s)", label, f.Text)
}

var descriptionRuleLabels = map[string]string{
	"instruction": "an instruction to the assistant",
	"concealment": "a request to keep something from the user",
	"tool":        "a reference to another tool",
	"secret":      "a reference to secrets",
	"file":        "a reference to files",
	"url":         "a new URL",
	"email":       "a new e-mail address",
	"hidden":      "invisible or bidirectional Unicode",
	"blob":        "a base64 blob",
	"growth":      "text grown far longer",
}

// descriptionPatterns are the rules that count matches: a rule fires when
// the new text matches more often than the old one.
var descriptionPatterns = []struct {
	rule  string
	hints []string // the pattern can match only text holding one of these (lower case)
	re    *regexp.Regexp
}{
	{"instruction", []string{"<"}, regexp.MustCompile(`(?i)<\s*/?\s*(important|system|instructions?|secret|hidden|admin|context|rules?|prompt)\b[^>]*>`)},
	{"instruction", []string{"must", "should", "shall", "need to", "have to", "required", "always", "never"}, regexp.MustCompile(`(?i)\b(you|the assistant|the model|the ai|the agent|the llm)\s+(must|should|shall|need to|have to|are required to|always|never)\b`)},
	{"instruction", []string{"ignore", "disregard", "forget", "override"}, regexp.MustCompile(`(?i)\b(ignore|disregard|forget|override)\s+(all\s+|any\s+)?(of\s+)?(the\s+|your\s+)?(previous|prior|above|earlier|other|system|original)\b`)},
	{"instruction", []string{"before"}, regexp.MustCompile(`(?i)\bbefore (using|calling|invoking|running) (this|the|any)\b`)},
	{"instruction", []string{"always", "first", "must"}, regexp.MustCompile(`(?i)\b(always|first|must)\s+(call|run|invoke|read|send|pass|forward|copy|upload|change)\b`)},
	{"instruction", []string{"make sure"}, regexp.MustCompile(`(?i)\bmake sure (to|you|that you)\b`)},
	{"instruction", []string{"content"}, regexp.MustCompile(`(?i)\b(pass|send|forward|upload|include|attach|append)\b[^.]{0,40}\b(its|the|their|file'?s?)\s+(content|contents)\b`)},
	{"instruction", []string{"system", "developer"}, regexp.MustCompile(`(?i)\b(system prompt|system message|developer message)\b`)},
	{"concealment", []string{"not", "n't", "dont", "never"}, regexp.MustCompile(`(?i)\b(do not|don't|dont|never|must not|should not)\s+(tell|inform|mention|reveal|notify|alert|show|let)\b`)},
	{"concealment", []string{"without"}, regexp.MustCompile(`(?i)\bwithout (telling|informing|notifying|asking|alerting|letting)\b`)},
	{"concealment", []string{"from the user"}, regexp.MustCompile(`(?i)\b(hide|conceal|keep)\b[^.]{0,30}\bfrom the user\b`)},
	{"concealment", []string{"the user"}, regexp.MustCompile(`(?i)\bthe user (must not|should not|shouldn't|need not|does not need to|doesn't need to) (know|see|be told)\b`)},
	{"secret", []string{"key", "token", "password", "passphrase", "credential", "cookie", "seed", "mnemonic", "id_rsa", "id_ed25519", "aws_secret"}, regexp.MustCompile(`(?i)\b(api[ _-]?keys?|access[ _-]?tokens?|secret[ _-]?keys?|private[ _-]?keys?|passwords?|passphrases?|credentials?|ssh[ _-]?keys?|bearer tokens?|session cookies?|seed phrases?|mnemonics?|id_rsa|id_ed25519|aws_secret_access_key)\b`)},
	{"file", []string{"~", "/etc/", "/home/", "/root/", "/users/", "/var/", "/proc/", ":\\", ".ssh", ".aws", ".cursor", ".gnupg", ".kube", ".docker", ".netrc", ".npmrc", ".pgpass", ".env", ".bash_history", "mcp.json", ".pem", ".p12", ".pfx", ".kdbx", ".keychain"}, regexp.MustCompile(`~[/\\][\w.\-/\\]+|(^|[\s'"` + "`" + `(])/(etc|home|root|Users|var|proc)/[\w.\-/]*|\b[A-Za-z]:\\[\w\\.\-]+|(^|[^\w])\.(ssh|aws|cursor|gnupg|kube|docker|netrc|npmrc|pgpass|env|bash_history)\b|\bmcp\.json\b|\b[\w-]+\.(pem|p12|pfx|kdbx|keychain)\b`)},
}

var (
	urlPattern    = regexp.MustCompile(`(?i)\b(?:https?|ftp|file|wss?)://[^\s)>"'\x60\]]+|\bwww\.[^\s)>"'\x60\]]+`)
	emailPattern  = regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}`)
	blobPattern   = regexp.MustCompile(`[A-Za-z0-9+/_-]{48,}={0,2}`)
	identPattern  = regexp.MustCompile("`([A-Za-z_][\\w.-]*)`|\\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\\b|\\b(?:the|a|an|call|use|invoke|run)\\s+([a-z][\\w-]*)\\s+(?:tool|function)\\b")
	deprecPattern = regexp.MustCompile(`(?i)\b(deprecated|obsolete|superseded|replaced by|renamed to|moved to|use\s+\S+\s+instead|instead use|prefer\s+\S+)\b`)
)

// meaningWords are the words whose change changes what a value means.
var meaningWords = map[string]bool{
	"not": true, "no": true, "never": true, "without": true, "except": true, "only": true, "cannot": true,
	"ms": true, "millisecond": true, "milliseconds": true, "second": true, "seconds": true, "sec": true, "secs": true,
	"minute": true, "minutes": true, "min": true, "mins": true, "hour": true, "hours": true, "day": true, "days": true,
	"week": true, "weeks": true, "month": true, "months": true, "year": true, "years": true,
	"byte": true, "bytes": true, "kb": true, "kib": true, "mb": true, "mib": true, "gb": true, "gib": true,
	"percent": true, "percentage": true, "ratio": true, "utc": true, "local": true, "inclusive": true, "exclusive": true,
	"celsius": true, "fahrenheit": true, "meters": true, "kilometers": true, "miles": true, "cents": true,
	"ascending": true, "descending": true, "asc": true, "desc": true, "true": true, "false": true,
}

// ClassifyDescription classifies a change of a description or title from
// old to new. known are the names that are not references to other tools
// (the tool's own name, its fields' names). The findings say what the new
// text has that the old one did not.
func ClassifyDescription(old, new string, known map[string]bool) (DescriptionClass, []DescriptionFinding) {
	return classifyDescription(old, new, func() map[string]bool { return known })
}

// classifyDescription is ClassifyDescription with the known names computed
// only when a name needs them.
func classifyDescription(old, new string, known func() map[string]bool) (DescriptionClass, []DescriptionFinding) {
	var found []DescriptionFinding
	add := func(rule, text string) {
		if len(text) > 60 {
			text = text[:57] + "..."
		}
		for _, f := range found {
			if f.Rule == rule {
				return // one finding per rule is enough to say what it is
			}
		}
		found = append(found, DescriptionFinding{rule, strings.TrimSpace(text)})
	}
	lowNew, lowOld := strings.ToLower(new), strings.ToLower(old)
	for _, p := range descriptionPatterns {
		if !containsAny(lowNew, p.hints) {
			continue // a cheap test first: regular expressions are the cost of a diff
		}
		nm := p.re.FindAllString(new, -1)
		if len(nm) > 0 && (!containsAny(lowOld, p.hints) || len(nm) > len(p.re.FindAllString(old, -1))) {
			add(p.rule, nm[0])
		}
	}
	hasURL := strings.Contains(new, "://") || strings.Contains(lowNew, "www.")
	if hasURL {
		oldURLs := stringSet(urlPattern.FindAllString(old, -1))
		for _, u := range urlPattern.FindAllString(new, -1) {
			if !oldURLs[u] {
				add("url", u)
			}
		}
	}
	if strings.Contains(new, "@") {
		oldMails := stringSet(emailPattern.FindAllString(old, -1))
		for _, m := range emailPattern.FindAllString(new, -1) {
			if !oldMails[m] {
				add("email", m)
			}
		}
	}
	if h, n := hiddenRunes(new); n > countHidden(old) {
		add("hidden", h)
	}
	if longRun(new, 48) {
		stripped := new
		if hasURL {
			stripped = urlPattern.ReplaceAllString(new, " ")
		}
		oldBlobs := stringSet(blobPattern.FindAllString(urlPattern.ReplaceAllString(old, " "), -1))
		for _, b := range blobPattern.FindAllString(stripped, -1) {
			if !oldBlobs[b] && looksEncoded(b) {
				add("blob", fmt.Sprintf("%d characters", len(b)))
			}
		}
	}
	if ol, nl := utf8.RuneCountInString(old), utf8.RuneCountInString(new); nl > 4*ol && nl-ol > 400 {
		add("growth", fmt.Sprintf("%d to %d characters", ol, nl))
	}
	if t := newToolReference(old, new, known); t != "" {
		add("tool", t)
	}
	if len(found) > 0 {
		return DescriptionInstructions, found
	}
	if !slices.Equal(meaningTokens(old), meaningTokens(new)) {
		return DescriptionMeaning, nil
	}
	return DescriptionReworded, nil
}

// newToolReference returns the first name in new that looks like a tool's
// (snake_case, `quoted`, "the X tool") and is neither in old nor known,
// outside a deprecation note ("DEPRECATED: Use read_text_file instead"
// points to a sibling, it does not shadow one).
func newToolReference(old, new string, knownFn func() map[string]bool) string {
	if !strings.ContainsAny(new, "`_") && !strings.Contains(new, " tool") && !strings.Contains(new, " function") {
		return ""
	}
	var known map[string]bool
	oldNames := map[string]bool{}
	for _, m := range identPattern.FindAllStringSubmatch(old, -1) {
		oldNames[firstGroup(m)] = true
	}
	for _, sentence := range splitSentences(new) {
		if deprecPattern.MatchString(sentence) {
			continue
		}
		for _, m := range identPattern.FindAllStringSubmatch(sentence, -1) {
			name := firstGroup(m)
			if name == "" || oldNames[name] || commonWord(name) || secretOrFile(name) {
				continue
			}
			if known == nil {
				known = knownFn()
			}
			if known[name] || known[strings.ToLower(name)] {
				continue
			}
			return name
		}
	}
	return ""
}

// secretOrFile reports whether a name is one the secret or file rules
// match (id_rsa): those rules report it.
func secretOrFile(name string) bool {
	for _, p := range descriptionPatterns {
		if (p.rule == "secret" || p.rule == "file") && p.re.MatchString(name) {
			return true
		}
	}
	return false
}

func firstGroup(m []string) string {
	for _, g := range m[1:] {
		if g != "" {
			return g
		}
	}
	return ""
}

// commonWord are words that "the X tool" matches without naming one.
func commonWord(s string) bool {
	switch strings.ToLower(s) {
	case "this", "that", "same", "other", "new", "old", "next", "previous", "search", "main", "default", "following", "above", "mcp", "right", "best":
		return true
	}
	return false
}

// splitSentences splits text at sentence ends and line breaks.
func splitSentences(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '\n' || r == '!' || r == '?' || r == ';' })
}

// hiddenRunes finds format characters (zero-width, bidirectional
// controls, Unicode tags, the byte order mark): the first as U+XXXX and
// how many there are.
func hiddenRunes(s string) (string, int) {
	first, n := "", 0
	for _, r := range s {
		if unicode.Is(unicode.Cf, r) || (r >= 0xFE00 && r <= 0xFE0F) {
			if n == 0 {
				first = fmt.Sprintf("U+%04X", r)
			}
			n++
		}
	}
	return first, n
}

func countHidden(s string) int { _, n := hiddenRunes(s); return n }

// looksEncoded tells a base64 run from a long word or identifier: it mixes
// upper case, lower case and digits.
func looksEncoded(s string) bool {
	var up, low, dig bool
	for _, r := range s {
		switch {
		case r >= 'A' && r <= 'Z':
			up = true
		case r >= 'a' && r <= 'z':
			low = true
		case r >= '0' && r <= '9':
			dig = true
		}
	}
	return up && low && dig
}

// meaningTokens are the numbers and meaning words of a text, sorted.
func meaningTokens(s string) []string {
	var out []string
	words := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for _, w := range words {
		if r, _ := utf8.DecodeRuneInString(w); meaningWords[w] || unicode.IsDigit(r) {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// longRun reports whether s holds n or more base64 characters in a row.
func longRun(s string, n int) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '_' || c == '-' {
			if run++; run >= n {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// describeFindings joins findings for a reason.
func describeFindings(found []DescriptionFinding) string {
	parts := make([]string, len(found))
	for i, f := range found {
		parts[i] = f.String()
	}
	return strings.Join(parts, "; ")
}

// knownNames collects the names a description may mention without
// referring to another tool: the tools' names and every property name of
// their schemas.
func knownNames(tools ...ToolDefinition) map[string]bool {
	known := map[string]bool{}
	seen := map[*SchemaNode]bool{}
	var visit func(n *SchemaNode, depth int)
	visit = func(n *SchemaNode, depth int) {
		if n == nil || seen[n] || depth > MaxSchemaDepth {
			return
		}
		seen[n] = true
		for name, c := range n.Properties {
			known[name] = true
			known[strings.ToLower(name)] = true
			visit(c, depth+1)
		}
		visit(n.Items, depth+1)
		visit(n.AdditionalProperties, depth+1)
		visit(n.Not, depth+1)
		for _, l := range [][]*SchemaNode{n.PrefixItems, n.AnyOf, n.OneOf, n.AllOf} {
			for _, c := range l {
				visit(c, depth+1)
			}
		}
		for _, m := range []map[string]*SchemaNode{n.PatternProperties, n.DependentSchemas, n.Applicators} {
			for _, c := range m {
				visit(c, depth+1)
			}
		}
		for _, r := range n.Required {
			known[r] = true
		}
	}
	for _, t := range tools {
		known[t.Name] = true
		visit(t.Input, 0)
		visit(t.Output, 0)
	}
	return known
}
