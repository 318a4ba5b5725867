// Package jsonstr appends strings as encoding/json writes them, without
// reflection for the plain ASCII that IDs, names, paths and CPU lists are.
// The checkpoint journal and simulate's answers share it.
package jsonstr

import "encoding/json"

// Append appends s as a JSON string, escaped exactly as json.Marshal
// escapes it: printable ASCII other than the characters it escapes
// (" \ < > &) is copied; anything else goes through encoding/json.
func Append(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
