package work

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Body is one event carried in a work item: its PRODUCTS sequence, store
// time (Unix ms), the op of its subject, and the stored message data.
//
// The subject is not carried: it is products.<item tenant>.<Op>, since an
// item holds one tenant's events and PRODUCTS binds one subject per op.
type Body struct {
	Seq      uint64
	StoredMs int64
	Op       events.Op
	Data     []byte
}

// An item that carries bodies goes on the wire as binary, not as JSON:
// every sink decodes every item, and base64 in JSON would cost a third
// more bytes and a decoding pass over every body. The layout is
//
//	0x02 | uvarint(len(head)) | head | Count frames
//
// where head is the item's JSON without bodies (as an item without
// bodies is sent, with neither seq_runs nor time_runs) and each frame is
//
//	uvarint(Seq - previous Seq) | varint(StoredMs - previous StoredMs) | op | uvarint(len(Data)) | Data
//
// The first frame's previous Seq is FromSeq - 1 and its previous
// StoredMs 0. op is one byte: 1 upsert, 2 delete (bodyOps). An item
// without bodies is JSON, whose first byte is '{': Decode tells the two
// apart by the first byte.
const wireBodies byte = 0x02

// bodyOps maps a frame's op byte to its op; 0 and the bytes past the
// table are not ops.
var bodyOps = [...]events.Op{1: events.OpUpsert, 2: events.OpDelete}

// opByte is bodyOps backwards: 0 for an op that is not in it.
func opByte(op events.Op) byte {
	for c, o := range bodyOps {
		if o != "" && o == op {
			return byte(c)
		}
	}
	return 0
}

// minFrame is the fewest bytes a frame takes: one each for the sequence
// step, the time step, the op and the length of empty data.
const minFrame = 4

// BodyOverhead is the most bytes a body takes on the wire besides its
// Data and the length of Data (Body.WireSize).
const BodyOverhead = 2*binary.MaxVarintLen64 + 1

// ItemOverhead bounds what an item that carries bodies takes on the wire
// besides its frames (Body.WireSize), for a tenant, destination and lease
// id as fairway makes them (events.MaxTenantBytes, tenancy lease ids): the
// format byte, the head's length and the head, and the message's
// Nats-Msg-Id header (Item.MsgID), which counts towards the server's max
// payload too. A dispatcher keeps ItemOverhead plus its bodies' WireSize
// at most the server's max payload (nats.Conn.MaxPayload), or checks the
// length of the encoded message before it publishes (Item.Msg; without
// copying the bodies, Item.EncodedSize).
const ItemOverhead = 1024

// WireSize is the most bytes b takes in an item: the frame's steps (at
// most BodyOverhead with the op), the length of Data and Data. It does not
// depend on the bodies around b, so a dispatcher can add it up as it
// cuts; the frame is usually 13–16 bytes shorter (steps of one byte).
func (b Body) WireSize() int {
	return BodyOverhead + uvarintLen(uint64(len(b.Data))) + len(b.Data)
}

// EncodedSize is the length of the data of it's message (Item.Msg),
// exactly, for a valid item: it encodes the item's JSON without bodies
// and adds up the frames without copying them.
func (it Item) EncodedSize() int {
	head, err := json.Marshal(it.wire())
	if err != nil {
		return 0
	}
	if it.Bodies == nil {
		return len(head)
	}
	return it.sizeWithHead(len(head))
}

// sizeWithHead is the length of it in the binary form with a head of
// headLen bytes.
func (it Item) sizeWithHead(headLen int) int {
	n := 1 + uvarintLen(uint64(headLen)) + headLen
	prevSeq, prevMs := it.FromSeq-1, int64(0)
	for _, b := range it.Bodies {
		n += frameSize(b, prevSeq, prevMs)
		prevSeq, prevMs = b.Seq, b.StoredMs
	}
	return n
}

// frameSize is the length of b's frame after a body of prevSeq and prevMs.
func frameSize(b Body, prevSeq uint64, prevMs int64) int {
	return uvarintLen(b.Seq-prevSeq) + varintLen(b.StoredMs-prevMs) + 1 + uvarintLen(uint64(len(b.Data))) + len(b.Data)
}

// bodiesProblems says what is wrong with it.Bodies (Item.Validate): one
// line per kind of problem, naming the first body concerned.
func (it Item) bodiesProblems() []string {
	var errs []string
	n := len(it.Bodies)
	if n != it.Count {
		errs = append(errs, fmt.Sprintf("bodies hold %d events, count is %d", n, it.Count))
	}
	if len(it.Seqs) > 0 || it.Times != nil {
		errs = append(errs, "an item that carries bodies lists no seqs or times (the bodies carry them)")
	}
	if n == 0 {
		return errs
	}
	if it.Bodies[0].Seq != it.FromSeq || it.Bodies[n-1].Seq != it.ToSeq {
		errs = append(errs, fmt.Sprintf("bodies run from seq %d to %d, the range is %d..%d", it.Bodies[0].Seq, it.Bodies[n-1].Seq, it.FromSeq, it.ToSeq))
	}
	for i := 1; i < n; i++ {
		if it.Bodies[i].Seq <= it.Bodies[i-1].Seq {
			errs = append(errs, fmt.Sprintf("body %d has seq %d after %d: bodies must be in increasing sequence order", i, it.Bodies[i].Seq, it.Bodies[i-1].Seq))
			break
		}
	}
	for i, b := range it.Bodies {
		if !b.Op.Valid() {
			errs = append(errs, fmt.Sprintf("body %d (seq %d) has op %q, not one of upsert, delete", i, b.Seq, b.Op))
			break
		}
	}
	return errs
}

// appendBodies appends it in the binary form to dst; it must be valid.
func (it Item) appendBodies(dst []byte) ([]byte, error) {
	head, err := json.Marshal(it.wire())
	if err != nil {
		return nil, err
	}
	if size := it.sizeWithHead(len(head)); cap(dst)-len(dst) < size {
		dst = append(make([]byte, 0, len(dst)+size), dst...)
	}
	dst = append(dst, wireBodies)
	dst = binary.AppendUvarint(dst, uint64(len(head)))
	dst = append(dst, head...)
	prevSeq, prevMs := it.FromSeq-1, int64(0)
	for _, b := range it.Bodies {
		dst = binary.AppendUvarint(dst, b.Seq-prevSeq)
		dst = binary.AppendVarint(dst, b.StoredMs-prevMs)
		dst = append(dst, opByte(b.Op))
		dst = binary.AppendUvarint(dst, uint64(len(b.Data)))
		dst = append(dst, b.Data...)
		prevSeq, prevMs = b.Seq, b.StoredMs
	}
	return dst, nil
}

// decodeBodies reads an item in the binary form (data[0] is wireBodies)
// and validates it. The bodies' Data alias data.
func decodeBodies(data []byte) (Item, error) {
	p := 1
	hl, n := binary.Uvarint(data[p:])
	if n <= 0 || hl > uint64(len(data)-p-n) {
		return Item{}, fmt.Errorf("%w: the head's length does not fit the %d-byte message", ErrInvalidItem, len(data))
	}
	p += n
	var w wireItem
	if err := json.Unmarshal(data[p:p+int(hl)], &w); err != nil {
		return Item{}, fmt.Errorf("%w: head: %v", ErrInvalidItem, err)
	}
	p += int(hl)
	if w.Seqs != nil || w.Times != nil || w.SeqRuns != nil || w.TimeRuns != nil {
		return Item{}, fmt.Errorf("%w: an item that carries bodies lists no seqs or times (the bodies carry them)", ErrInvalidItem)
	}
	it := Item(w.itemFields)
	if err := it.Validate(); err != nil { // the head alone: Bodies is nil
		return it, err
	}
	bodies, err := decodeFrames(data[p:], it.FromSeq, it.ToSeq, it.Count)
	if err != nil {
		return it, fmt.Errorf("%w: %v", ErrInvalidItem, err)
	}
	it.Bodies = bodies
	return it, nil
}

// decodeFrames reads count frames, the whole of data, whose sequences
// rise from from to to. The count is checked against the bytes there are
// before anything is allocated for it.
func decodeFrames(data []byte, from, to uint64, count int) ([]Body, error) {
	if count > len(data)/minFrame {
		return nil, fmt.Errorf("%d bodies cannot fit in %d bytes", count, len(data))
	}
	bodies := make([]Body, count)
	p, prevSeq, prevMs := 0, from-1, int64(0)
	for i := range bodies {
		step, n := binary.Uvarint(data[p:])
		if n <= 0 {
			return nil, fmt.Errorf("body %d: sequence step is cut short or too long", i)
		}
		p += n
		if step == 0 || step > to-prevSeq {
			return nil, fmt.Errorf("body %d: sequence step %d after seq %d leaves the range %d..%d or does not rise", i, step, prevSeq, from, to)
		}
		seq := prevSeq + step
		if i == 0 && seq != from {
			return nil, fmt.Errorf("body 0 has seq %d, the range starts at %d", seq, from)
		}
		msStep, n := binary.Varint(data[p:])
		if n <= 0 {
			return nil, fmt.Errorf("body %d (seq %d): time step is cut short or too long", i, seq)
		}
		p += n
		if p >= len(data) {
			return nil, fmt.Errorf("body %d (seq %d): cut short before its op", i, seq)
		}
		c := data[p]
		p++
		if int(c) >= len(bodyOps) || bodyOps[c] == "" {
			return nil, fmt.Errorf("body %d (seq %d): op byte 0x%02x is not one of 1 (upsert), 2 (delete)", i, seq, c)
		}
		size, n := binary.Uvarint(data[p:])
		if n <= 0 || size > uint64(len(data)-p-n) {
			return nil, fmt.Errorf("body %d (seq %d): its length does not fit the %d bytes left", i, seq, len(data)-p)
		}
		p += n
		end := p + int(size)
		bodies[i] = Body{Seq: seq, StoredMs: prevMs + msStep, Op: bodyOps[c], Data: data[p:end:end]}
		p, prevSeq, prevMs = end, seq, prevMs+msStep
	}
	if p != len(data) {
		return nil, fmt.Errorf("%d bytes after the last of %d bodies", len(data)-p, count)
	}
	if prevSeq != to {
		return nil, fmt.Errorf("bodies end at seq %d, the range at %d", prevSeq, to)
	}
	return bodies, nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// varintLen is the length of binary.AppendVarint's zig-zag form of x.
func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}
