package wire

// memberName reads `"name":` at i, for a name of printable ASCII without escapes.
func memberName(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	j := i + 1
	for j < len(b) && b[j] >= 0x20 && b[j] < 0x7f && b[j] != '"' && b[j] != '\\' {
		j++
	}
	if j >= len(b) || b[j] != '"' {
		return "", 0, false
	}
	k := SkipSpace(b, j+1)
	if k >= len(b) || b[k] != ':' {
		return "", 0, false
	}
	return string(b[i+1 : j]), k + 1, true
}

// PlainInteger: digits without a leading zero (a JSON integer that is not negative).
func PlainInteger(v []byte) bool {
	if len(v) == 0 || len(v) > 18 || (v[0] == '0' && len(v) > 1) {
		return false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// SkipSpace returns the index of the first byte at or after i that is not JSON
// whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// SkipValue returns the end of the JSON value starting at i (-1 when none can be
// found): a string, an object or array by its brackets outside strings, anything else
// up to the next delimiter. It does not validate: the scanners' callers do.
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				i--
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// skipString returns the end of the string starting at i (-1 if it does not end).
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// ScanObject calls member for each member of the JSON object b (surrounded by
// optional whitespace) until it returns false; false when b is not such an object as
// far as the scan sees (it does not validate the values).
func ScanObject(b []byte, member func(name string, v []byte) bool) bool {
	i := SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	if i = SkipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return SkipSpace(b, i+1) == len(b)
	}
	for {
		name, next, ok := memberName(b, i)
		if !ok {
			return false
		}
		start := SkipSpace(b, next)
		end := SkipValue(b, start)
		if end < 0 || !member(name, b[start:end]) {
			return false
		}
		switch i = SkipSpace(b, end); {
		case i < len(b) && b[i] == '}':
			return SkipSpace(b, i+1) == len(b)
		case i >= len(b) || b[i] != ',':
			return false
		}
		i = SkipSpace(b, i+1)
	}
}

// PlainASCIIString: v is a JSON string of printable ASCII without escapes.
func PlainASCIIString(v []byte) bool {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return false
	}
	for _, c := range v[1 : len(v)-1] {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
