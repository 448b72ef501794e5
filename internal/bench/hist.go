package bench

import (
	"math/bits"
	"time"
)

// histogram counts durations in log-linear buckets: 64 buckets per power of
// two, so a percentile read back is within about 1.6% of the sample it
// stands for. A fan-out run records millions of deliveries; a histogram
// keeps that in a fixed 32 KiB instead of a slice of every sample.
type histogram struct {
	counts [64 * 64]uint64
	n      uint64
	max    int64
}

const subBuckets = 64

func bucketOf(v int64) int {
	if v < 0 {
		v = 0
	}
	if v < subBuckets {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - 7 // keep the top 7 bits: 64..127
	return (shift+1)*subBuckets + int(uint64(v)>>shift) - subBuckets
}

// upperOf is the largest value that falls in bucket i.
func upperOf(i int) int64 {
	if i < subBuckets {
		return int64(i)
	}
	shift := i/subBuckets - 1
	return (int64(i%subBuckets+subBuckets+1) << shift) - 1
}

func (h *histogram) record(d time.Duration) {
	v := int64(d)
	h.counts[bucketOf(v)]++
	h.n++
	if v > h.max {
		h.max = v
	}
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the duration below which the fraction q of the samples
// lie (the bucket's upper bound, never above the largest sample).
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(upperOf(i), h.max))
		}
	}
	return time.Duration(h.max)
}
