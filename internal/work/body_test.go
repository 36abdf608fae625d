package work_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
)

// carried returns an item of count events carrying their bodies: sequences
// from from on in steps of 1–3 (sometimes far), store times mostly rising
// by a millisecond or none, sometimes stepping back.
func carried(rng *rand.Rand, from uint64, count int) work.Item {
	it := work.Item{Tenant: "acme", Dest: "postgres", FromSeq: from, Count: count, LeaseID: "acme/postgres/1/9", Token: 9,
		DispatchedAt: time.Date(2026, 11, 25, 10, 0, 0, 123, time.UTC)}
	seq, ms := from, int64(1_764_000_000_000)+rng.Int64N(1e9)
	for i := range count {
		if i > 0 {
			seq += 1 + rng.Uint64N(3)
			if rng.IntN(20) == 0 {
				seq += rng.Uint64N(1 << 40)
			}
		}
		switch rng.IntN(10) {
		case 0:
			ms -= rng.Int64N(5000) // a clock stepped back
		case 1, 2, 3:
			ms += rng.Int64N(3)
		}
		op := events.OpUpsert
		if rng.IntN(4) == 0 {
			op = events.OpDelete
		}
		data := make([]byte, 1+rng.IntN(300))
		for j := range data {
			data[j] = byte(rng.IntN(256))
		}
		it.Bodies = append(it.Bodies, work.Body{Seq: seq, StoredMs: ms, Op: op, Data: data})
	}
	it.ToSeq = seq
	return it
}

// Items carrying bodies go on the wire in the binary form and come back
// the same; EncodedSize is the exact length, WireSize a bound of each
// body's share, and the decoded bodies alias the message.
func TestItemBodiesRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 300 {
		it := carried(rng, 1+rng.Uint64N(1<<50), 1+rng.IntN(600))
		it.CaughtUp, it.Replay = n%2 == 0, n%3 == 0
		m, err := it.Msg()
		if err != nil {
			t.Fatalf("item %d: %v", n, err)
		}
		if m.Data[0] != 0x02 {
			t.Fatalf("item %d: first byte 0x%02x, want 0x02", n, m.Data[0])
		}
		if got := it.EncodedSize(); got != len(m.Data) {
			t.Fatalf("item %d: EncodedSize %d, message %d bytes", n, got, len(m.Data))
		}
		bound := work.ItemOverhead
		for _, b := range it.Bodies {
			bound += b.WireSize()
		}
		if len(m.Data) > bound {
			t.Fatalf("item %d: %d bytes, more than ItemOverhead plus the bodies' WireSize %d", n, len(m.Data), bound)
		}
		back, err := work.Decode(m.Data)
		if err != nil {
			t.Fatalf("item %d: decode: %v", n, err)
		}
		if !reflect.DeepEqual(back, it) {
			t.Fatalf("item %d: decoded differs:\n got %+v\nwant %+v", n, back, it)
		}
		last := back.Bodies[len(back.Bodies)-1].Data
		m.Data[len(m.Data)-1]++
		if last[len(last)-1] != m.Data[len(m.Data)-1] {
			t.Fatalf("item %d: the last body's data does not alias the message", n)
		}
	}
	// Items without bodies keep their JSON, and EncodedSize is its length.
	plain := codecItems()["spread500"]
	m, err := plain.Msg()
	if err != nil {
		t.Fatal(err)
	}
	if m.Data[0] != '{' || plain.EncodedSize() != len(m.Data) {
		t.Fatalf("plain item: first byte %q, EncodedSize %d, %d bytes", m.Data[0], plain.EncodedSize(), len(m.Data))
	}
}

// The binary form, byte by byte: a head, then a frame per body.
func TestItemBodiesLayout(t *testing.T) {
	t.Parallel()
	it := work.Item{Tenant: "acme", Dest: "postgres", FromSeq: 300, ToSeq: 302, Count: 2, LeaseID: "acme/postgres/0/5", Token: 5,
		DispatchedAt: time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC), CaughtUp: true,
		Bodies: []work.Body{
			{Seq: 300, StoredMs: 1000, Op: events.OpUpsert, Data: []byte("ab")},
			{Seq: 302, StoredMs: 999, Op: events.OpDelete, Data: []byte("c")},
		}}
	m, err := it.Msg()
	if err != nil {
		t.Fatal(err)
	}
	head := `{"tenant":"acme","dest":"postgres","from_seq":300,"to_seq":302,"count":2,"lease_id":"acme/postgres/0/5","token":5,` +
		`"dispatched_at":"2026-11-25T10:00:00Z","caught_up":true}`
	if len(head) != 170 {
		t.Fatalf("head is %d bytes", len(head))
	}
	want := append([]byte{0x02, 0xaa, 0x01}, head...) // the form, then uvarint 170
	want = append(want,
		1, 0xd0, 0x0f, 1, 2, 'a', 'b', // seq +1 (300), ms +1000 (zig-zag 2000), upsert, 2 bytes
		2, 1, 2, 1, 'c', // seq +2 (302), ms -1 (zig-zag 1), delete, 1 byte
	)
	if !bytes.Equal(m.Data, want) {
		t.Fatalf("wire form\n got %q\nwant %q", m.Data, want)
	}
	if m.Subject != "work.postgres.acme" || m.Header.Get(nats.MsgIdHdr) != "acme/postgres/0/5/300-302" {
		t.Fatalf("subject %q msg id %q", m.Subject, m.Header.Get(nats.MsgIdHdr))
	}
}

// ItemOverhead holds the longest tenant, destination and lease id fairway
// makes, with the Nats-Msg-Id header counted.
func TestItemOverheadBoundsTheLongestHead(t *testing.T) {
	t.Parallel()
	tenant := strings.Repeat("t", events.MaxTenantBytes)
	dest := "b2b:" + strings.Repeat("p", events.MaxTenantBytes)
	it := work.Item{Tenant: tenant, Dest: dest, FromSeq: math.MaxUint64 - 1, ToSeq: math.MaxUint64, Count: 2,
		LeaseID: fmt.Sprintf("%s/%s/%d/%d", tenant, dest, math.MaxInt64, math.MinInt64), Token: math.MinInt64,
		DispatchedAt: time.Date(2026, 11, 25, 10, 0, 0, 123456789, time.FixedZone("", -(12*3600+59*60))),
		Replay:       true, CaughtUp: true,
		Bodies: []work.Body{{Seq: math.MaxUint64 - 1, StoredMs: math.MinInt64, Op: events.OpUpsert}, {Seq: math.MaxUint64, StoredMs: math.MaxInt64, Op: events.OpDelete}}}
	m, err := it.Msg()
	if err != nil {
		t.Fatal(err)
	}
	hdr := 0
	for k, vs := range m.Header {
		for _, v := range vs {
			hdr += len(k) + len(v) + 4 // "k: v\r\n"
		}
	}
	hdr += len("NATS/1.0\r\n\r\n")
	if got := hdr + len(m.Data) - it.Bodies[0].WireSize() - it.Bodies[1].WireSize(); got > work.ItemOverhead {
		t.Fatalf("head and headers take %d bytes, ItemOverhead is %d", got, work.ItemOverhead)
	}
	back, err := work.Decode(m.Data)
	if err != nil || !reflect.DeepEqual(back.Bodies[1], work.Body{Seq: math.MaxUint64, StoredMs: math.MaxInt64, Op: events.OpDelete, Data: []byte{}}) {
		t.Fatalf("decoded %+v, %v", back.Bodies, err)
	}
}

// Bodies that do not match the item make it invalid, in Validate and Msg.
func TestItemBodiesValidate(t *testing.T) {
	t.Parallel()
	ok := carried(rand.New(rand.NewPCG(5, 6)), 100, 5)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		mutate func(*work.Item)
		reason string
	}{
		"fewer than count":  {func(i *work.Item) { i.Count = 6 }, "bodies hold 5 events, count is 6"},
		"none":              {func(i *work.Item) { i.Bodies = []work.Body{} }, "bodies hold 0 events"},
		"first not from":    {func(i *work.Item) { i.FromSeq-- }, "bodies run from seq"},
		"last not to":       {func(i *work.Item) { i.ToSeq++ }, "bodies run from seq"},
		"not increasing":    {func(i *work.Item) { i.Bodies[2].Seq = i.Bodies[1].Seq }, "body 2 has seq"},
		"unknown op":        {func(i *work.Item) { i.Bodies[3].Op = "merge" }, `body 3 (seq`},
		"empty op":          {func(i *work.Item) { i.Bodies[0].Op = "" }, `body 0 (seq`},
		"with seqs":         {func(i *work.Item) { i.Seqs = seqsOf(i.Bodies) }, "lists no seqs or times"},
		"with times":        {func(i *work.Item) { i.Times = &work.Times{OffsetsMs: make([]uint32, 5)} }, "lists no seqs or times"},
		"bad item as well":  {func(i *work.Item) { i.LeaseID = "" }, "lease_id is empty"},
		"bodies out of seq": {func(i *work.Item) { i.Bodies[0], i.Bodies[4] = i.Bodies[4], i.Bodies[0] }, "bodies run from seq"},
	}
	for name, c := range cases {
		it := ok
		it.Bodies = append([]work.Body(nil), ok.Bodies...)
		c.mutate(&it)
		err := it.Validate()
		if !errors.Is(err, work.ErrInvalidItem) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: err %v, want ErrInvalidItem with %q", name, err, c.reason)
		}
		if _, err := it.Msg(); err == nil {
			t.Errorf("%s: Msg accepted an invalid item", name)
		}
	}
}

func seqsOf(bs []work.Body) []uint64 {
	seqs := make([]uint64, len(bs))
	for i, b := range bs {
		seqs[i] = b.Seq
	}
	return seqs
}

// Frames that do not describe the item's events make it invalid, with the
// reason; a count the message cannot hold is refused before anything is
// allocated for it; every cut of a good message is refused.
func TestItemBadFrames(t *testing.T) {
	t.Parallel()
	raw := func(head string, frames ...byte) []byte {
		return append(append(binary.AppendUvarint([]byte{0x02}, uint64(len(head))), head...), frames...)
	}
	msg := func(from, to uint64, count int, frames ...byte) []byte {
		return raw(fmt.Sprintf(`{"tenant":"acme","dest":"postgres","from_seq":%d,"to_seq":%d,"count":%d,"lease_id":"acme/postgres/0/5","token":5}`,
			from, to, count), frames...)
	}
	const listed = `{"tenant":"acme","dest":"postgres","from_seq":10,"to_seq":12,"count":2,"lease_id":"acme/postgres/0/5","token":5,`
	good := msg(10, 12, 2, 1, 2, 1, 1, 'x', 2, 0, 2, 1, 'y')
	if it, err := work.Decode(good); err != nil || len(it.Bodies) != 2 || it.Bodies[1].Seq != 12 || it.Bodies[1].Op != events.OpDelete {
		t.Fatalf("good message: %+v %v", it, err)
	}
	cases := map[string]struct {
		data   []byte
		reason string
	}{
		"trailing byte":       {append(bytes.Clone(good), 0), "1 bytes after the last of 2 bodies"},
		"op 0":                {msg(10, 12, 2, 1, 2, 0, 1, 'x', 2, 0, 2, 1, 'y'), "op byte 0x00"},
		"op 3":                {msg(10, 12, 2, 1, 2, 1, 1, 'x', 2, 0, 3, 1, 'y'), "op byte 0x03"},
		"seq step 0":          {msg(10, 12, 2, 1, 2, 1, 1, 'x', 0, 0, 2, 1, 'y'), "does not rise"},
		"first after from":    {msg(10, 12, 2, 2, 2, 1, 1, 'x', 1, 0, 2, 1, 'y'), "body 0 has seq 11"},
		"past to":             {msg(10, 12, 2, 1, 2, 1, 1, 'x', 3, 0, 2, 1, 'y'), "leaves the range 10..12"},
		"ends before to":      {msg(10, 12, 2, 1, 2, 1, 1, 'x', 1, 0, 2, 1, 'y'), "bodies end at seq 11"},
		"data past the end":   {msg(10, 12, 2, 1, 2, 1, 1, 'x', 2, 0, 2, 2, 'y'), "its length does not fit"},
		"fewer frames":        {msg(10, 12, 2, 1, 2, 1, 1, 'x'), "2 bodies cannot fit in 5 bytes"},
		"more frames":         {msg(10, 12, 2, 1, 2, 1, 1, 'x', 1, 0, 2, 1, 'y', 1, 0, 1, 0), "bytes after the last of 2 bodies"},
		"seq step overflows":  {msg(10, 12, 2, append([]byte{1, 2, 1, 1, 'x'}, append(binary.AppendUvarint(nil, math.MaxUint64), 0, 2, 1, 'y')...)...), "leaves the range"},
		"huge count":          {msg(1, 4_000_000_000, 4_000_000_000, 1, 0, 1, 0), "4000000000 bodies cannot fit in 4 bytes"},
		"count past range":    {msg(10, 12, 4, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0), "count 4 does not fit range 10..12"},
		"head length too big": {append([]byte{0x02, 0xff, 0x7f}, `{}`...), "the head's length does not fit"},
		"head length cut":     {[]byte{0x02, 0x80}, "the head's length does not fit"},
		"only the byte":       {[]byte{0x02}, "the head's length does not fit"},
		"head not json":       {raw(`{"t`), "head:"},
		"head with seq_runs":  {raw(listed+`"seq_runs":[2,1]}`, 1, 0, 1, 0, 2, 0, 1, 0), "lists no seqs or times"},
		"head with times":     {raw(listed+`"times":{"base_ms":1,"offsets_ms":[0,0]}}`, 1, 0, 1, 0, 2, 0, 1, 0), "lists no seqs or times"},
		"head invalid":        {msg(10, 12, 0), "count 0 does not fit"},
		"time step cut":       {msg(10, 12, 2, 1, 2, 1, 1, 'x', 2, 0x80, 0x80, 0x80), "time step is cut short"},
		"op missing":          {msg(10, 12, 2, 1, 2, 1, 3, 'x', 'y', 'z', 2, 0), "cut short before its op"},
		"seq step too long":   {msg(10, 12, 2, 1, 2, 1, 1, 'x', 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01), "sequence step is cut short or too long"},
	}
	for name, c := range cases {
		_, err := work.Decode(c.data)
		if !errors.Is(err, work.ErrInvalidItem) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: err %v, want ErrInvalidItem with %q", name, err, c.reason)
		}
	}
	m, err := carried(rand.New(rand.NewPCG(7, 8)), 5, 20).Msg()
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(m.Data) {
		if _, err := work.Decode(m.Data[:n]); !errors.Is(err, work.ErrInvalidItem) {
			t.Fatalf("the first %d of %d bytes: err %v, want ErrInvalidItem", n, len(m.Data), err)
		}
	}
}

// An item that claims more bodies than its message can hold is refused
// before anything is allocated for them. (Not parallel: AllocsPerRun.)
func TestItemHugeCountAllocatesNothing(t *testing.T) {
	h := `{"tenant":"acme","dest":"postgres","from_seq":1,"to_seq":4000000000,"count":4000000000,"lease_id":"acme/postgres/0/5","token":5}`
	huge := append(append(binary.AppendUvarint([]byte{0x02}, uint64(len(h))), h...), 1, 0, 1, 0)
	if _, err := work.Decode(huge); !errors.Is(err, work.ErrInvalidItem) {
		t.Fatalf("err %v", err)
	}
	if a := testing.AllocsPerRun(10, func() { _, _ = work.Decode(huge) }); a > 20 {
		t.Errorf("decoding an item that claims 4e9 bodies allocated %v times", a)
	}
}

// FuzzDecode: Decode never panics; an item it accepts is valid, encodes
// to EncodedSize bytes and decodes again to the same item.
func FuzzDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, it := range []work.Item{carried(rng, 1, 1), carried(rng, 77, 3), carried(rng, 1<<40, 12),
		codecItems()["single"], codecItems()["spread500"]} {
		m, err := it.Msg()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m.Data)
	}
	f.Add([]byte(`{"tenant":"acme","dest":"postgres","from_seq":10,"to_seq":14,"count":3,"lease_id":"x","token":5,"seqs":[10,12,14]}`))
	f.Add([]byte{0x02})
	f.Fuzz(func(t *testing.T, data []byte) {
		it, err := work.Decode(data)
		if err != nil {
			if !errors.Is(err, work.ErrInvalidItem) {
				t.Fatalf("err %v is not ErrInvalidItem", err)
			}
			return
		}
		if err := it.Validate(); err != nil {
			t.Fatalf("decoded an invalid item: %v", err)
		}
		m, err := it.Msg()
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if it.EncodedSize() != len(m.Data) {
			t.Fatalf("EncodedSize %d, message %d bytes", it.EncodedSize(), len(m.Data))
		}
		back, err := work.Decode(m.Data)
		if err != nil {
			t.Fatalf("decode the re-encoded item: %v", err)
		}
		if !reflect.DeepEqual(normal(back), normal(it)) {
			t.Fatalf("decoded again differs:\n got %+v\nwant %+v", back, it)
		}
	})
}

// normal makes empty lists and data nil and times comparable, so that
// equal items compare equal whichever way they were decoded (JSON omits
// an empty seqs list).
func normal(it work.Item) work.Item {
	it.DispatchedAt = it.DispatchedAt.UTC()
	if len(it.Seqs) == 0 {
		it.Seqs = nil
	}
	if it.Bodies != nil {
		bs := make([]work.Body, len(it.Bodies))
		for i, b := range it.Bodies {
			if len(b.Data) == 0 {
				b.Data = nil
			}
			bs[i] = b
		}
		it.Bodies = bs
	}
	return it
}

// A redrive carries its events: it round-trips with its bodies and the
// flag, and one without bodies is refused both ways (read from PRODUCTS,
// its sequences may name other events).
func TestRedriveItemCarriesItsEvents(t *testing.T) {
	t.Parallel()
	it := carried(rand.New(rand.NewPCG(7, 7)), 40, 3)
	it.Redrive = true
	m, err := it.Msg()
	if err != nil {
		t.Fatal(err)
	}
	got, err := work.Decode(m.Data)
	if err != nil || !got.Redrive || len(got.Bodies) != 3 {
		t.Fatalf("decoded %+v, %v; want a redrive with 3 bodies", got, err)
	}
	bare := it
	bare.Bodies = nil
	if _, err := bare.Msg(); !errors.Is(err, work.ErrInvalidItem) {
		t.Fatalf("Msg of a redrive without bodies: %v, want ErrInvalidItem", err)
	}
	if _, err := work.Decode([]byte(`{"tenant":"acme","dest":"postgres","from_seq":40,"to_seq":42,"count":3,"lease_id":"acme/postgres/1/9","token":9,"redrive":true}`)); !errors.Is(err, work.ErrInvalidItem) {
		t.Fatalf("Decode of a redrive without bodies: %v, want ErrInvalidItem", err)
	}
}
