package bench

import (
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		var h histogram
		for i := 1; i <= 10000; i++ {
			h.record(time.Duration(i) * time.Microsecond)
		}
		for _, c := range []struct {
			q    float64
			want time.Duration
		}{{0.5, 5000 * time.Microsecond}, {0.99, 9900 * time.Microsecond}, {0.999, 9990 * time.Microsecond}, {1, 10000 * time.Microsecond}} {
			got := h.quantile(c.q)
			if lo, hi := c.want, c.want+c.want/50; got < lo || got > hi {
				t.Fatalf("quantile(%v) = %v, want within [%v, %v]", c.q, got, lo, hi)
			}
		}
	})
	t.Run("Buckets", func(t *testing.T) {
		// Every value falls in a bucket whose upper bound is at least the
		// value and the bucket before it ends below the value.
		for _, v := range []int64{0, 1, 63, 64, 65, 127, 128, 129, 1000, 1 << 20, 1<<40 + 12345} {
			i := bucketOf(v)
			if got := upperOf(i); got < v {
				t.Fatalf("upperOf(bucketOf(%d)) = %d, below the value", v, got)
			}
			if i > 0 && upperOf(i-1) >= v {
				t.Fatalf("upperOf(%d) = %d, not below %d", i-1, upperOf(i-1), v)
			}
		}
	})
	t.Run("Merge", func(t *testing.T) {
		var a, b histogram
		a.record(time.Millisecond)
		b.record(3 * time.Millisecond)
		a.merge(&b)
		if got, want := a.n, uint64(2); got != want {
			t.Fatalf("n = %d, want %d", got, want)
		}
		if got, want := a.quantile(1), 3*time.Millisecond; got != want {
			t.Fatalf("max quantile = %v, want %v", got, want)
		}
	})
	t.Run("Empty", func(t *testing.T) {
		var h histogram
		if got := h.quantile(0.99); got != 0 {
			t.Fatalf("quantile of nothing = %v, want 0", got)
		}
	})
}
