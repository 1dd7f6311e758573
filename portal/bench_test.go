package portal

import "testing"

// BenchmarkScrypt: the cost of one password hash at the default parameters and at
// the tests' cheap ones (report the ratio; the box is shared).
func BenchmarkScrypt(b *testing.B) {
	for _, c := range []struct {
		name string
		sp   ScryptParams
	}{{"default-N32768", DefaultScrypt}, {"tests-N1024", ScryptParams{N: 1 << 10, R: 8, P: 1}}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := hashPassword("correct horse battery", c.sp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
