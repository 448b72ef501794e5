package webhook

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is the delay before attempt n+1 (n >= 1): lo doubled n-1
// times, capped at hi, drawn uniformly from its upper half.
func backoff(lo, hi time.Duration, n int) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}

// sleepOrWake waits d or until wake (nil: never); false when ctx ended
// first.
func sleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	case <-wake:
		return true
	}
}
