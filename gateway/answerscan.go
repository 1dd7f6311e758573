package gateway

import (
	"encoding/json"
	"strconv"
)

// scanAnswer reads a stdio upstream's answer line of the usual shape without
// decoding it: a JSON object with exactly the members "jsonrpc":"2.0", "id" (an
// integer) and "result" (an object), in any order, names spelt exactly so, each once.
// It returns the id and the result's bytes as json.Unmarshal into answerEnvelope
// would give them (FuzzScanAnswer), having checked that the result is valid JSON;
// false for any other line, which claim decodes in full. The result is decoded once
// later (parseHead), so the line is no longer decoded twice.
func scanAnswer(line []byte) (int64, json.RawMessage, bool) {
	i := skipSpace(line, 0)
	if i >= len(line) || line[i] != '{' {
		return 0, nil, false
	}
	var id, result []byte
	version := false
	for i = skipSpace(line, i+1); ; i = skipSpace(line, i+1) {
		name, next, ok := memberName(line, i)
		if !ok {
			return 0, nil, false
		}
		start := skipSpace(line, next)
		end := skipValue(line, start)
		if end < 0 {
			return 0, nil, false
		}
		v := line[start:end]
		switch {
		case name == "jsonrpc" && !version && string(v) == `"2.0"`:
			version = true
		case name == "id" && id == nil && plainInteger(v):
			id = v
		case name == "result" && result == nil && v[0] == '{':
			result = v
		default:
			return 0, nil, false
		}
		if i = skipSpace(line, end); i < len(line) && line[i] == '}' {
			break
		}
		if i >= len(line) || line[i] != ',' {
			return 0, nil, false
		}
	}
	if skipSpace(line, i+1) != len(line) || !version || id == nil || result == nil || !json.Valid(result) {
		return 0, nil, false
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	if err != nil {
		return 0, nil, false
	}
	return n, result, true
}

// memberName reads `"name":` at i, for a name of plain lowercase letters.
func memberName(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	j := i + 1
	for j < len(b) && b[j] >= 'a' && b[j] <= 'z' {
		j++
	}
	if j >= len(b) || b[j] != '"' {
		return "", 0, false
	}
	k := skipSpace(b, j+1)
	if k >= len(b) || b[k] != ':' {
		return "", 0, false
	}
	return string(b[i+1 : j]), k + 1, true
}

// plainInteger: digits without a leading zero (a JSON integer that is not negative).
func plainInteger(v []byte) bool {
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

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value starting at i (-1 when none can be
// found): a string, an object or array by its brackets outside strings, anything else
// up to the next delimiter. It does not validate: scanAnswer validates the result.
func skipValue(b []byte, i int) int {
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
