// SPDX-License-Identifier: Apache-2.0

// util_test.go — small helpers of the tests: comparing JSON values.

package cbdclient

import (
	"bytes"
	"encoding/json"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// sameJSON compares two values by their JSON text, numbers normalized.
func sameJSON(a, b any) bool {
	var x, y any
	_ = json.Unmarshal([]byte(jsonText(a)), &x)
	_ = json.Unmarshal([]byte(jsonText(b)), &y)
	return jsonText(x) == jsonText(y)
}
