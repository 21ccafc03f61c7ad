// SPDX-License-Identifier: Apache-2.0

package xxh3

import (
	"bufio"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"testing"
)

// testdata/xxh128.txt: "<length> <XXH3-128, canonical hex>" of the bytes
// (j*7 + 3) mod 251, j = 0..length-1, as libxxhash 0.8.1's XXH3_128bits
// computes them: every length up to 260 (each short and mid-size branch and
// its edges), block edges (1024 bytes) and long inputs.
func TestAgainstLibxxhash(t *testing.T) {
	f, err := os.Open("testdata/xxh128.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := make([]byte, 1<<21)
	for j := range data {
		data[j] = byte((j*7 + 3) % 251)
	}
	lines := 0
	for s := bufio.NewScanner(f); s.Scan(); lines++ {
		fields := strings.Fields(s.Text())
		n, _ := strconv.Atoi(fields[0])
		d := Sum128(data[:n])
		if got := hex.EncodeToString(d[:]); got != fields[1] {
			t.Errorf("length %d: %s, libxxhash %s", n, got, fields[1])
		}
	}
	if lines < 270 {
		t.Fatalf("%d reference lines", lines)
	}
}
