package consumer

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSpreadOverLanes: every record lands in exactly one lane, a partition's records all
// in the same lane and in their order, and the lanes carry as even a share of the
// records as whole partitions allow — the poll waits for the fullest.
func TestSpreadOverLanes(t *testing.T) {
	t.Parallel()
	// Partition p gets sizes[p] records, interleaved as a fetch hands them over.
	sizes := []int{1, 5, 3, 4, 3}
	var recs []*kgo.Record
	next := make([]int64, len(sizes))
	for more := true; more; {
		more = false
		for p, n := range sizes {
			if next[p] < int64(n) {
				recs = append(recs, &kgo.Record{Topic: "t", Partition: int32(p), Offset: next[p]})
				next[p]++
				more = true
			}
		}
	}

	lanes := spreadOverLanes(recs, 2)
	require.Len(t, lanes, 2)
	laneOf := map[int32]int{}
	total := 0
	for l, lane := range lanes {
		last := map[int32]int64{}
		for _, r := range lane {
			if prev, ok := laneOf[r.Partition]; ok {
				require.Equal(t, prev, l, "partition %d split over lanes", r.Partition)
			}
			laneOf[r.Partition] = l
			if off, ok := last[r.Partition]; ok {
				require.Equal(t, off+1, r.Offset, "partition %d out of order", r.Partition)
			}
			last[r.Partition] = r.Offset
		}
		total += len(lane)
	}
	require.Equal(t, len(recs), total)
	// 16 records in partitions of 5, 4, 3, 3, 1: 8 and 8 (5+3 and 4+3+1). Handing
	// partitions out in turn, as they first appear, gives 1+3+3 = 7 and 5+4 = 9.
	require.Len(t, lanes[0], 8)
	require.Len(t, lanes[1], 8)

	require.Len(t, spreadOverLanes(recs[:3], 4), 4, "more lanes than partitions: some stay empty")
	require.Empty(t, spreadOverLanes(nil, 3)[0])
}
