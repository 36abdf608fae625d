package work

// SetReadLimits sets how many events one direct get of r.ReadItem asks for
// (ReadChunk by default) and how many of r's direct gets may be in flight
// at once (ReadsInFlight by default; 0: no bound).
func SetReadLimits(r *Reader, chunk, inFlight int) {
	r.chunk, r.slots = chunk, nil
	if inFlight > 0 {
		r.slots = make(chan struct{}, inFlight)
	}
}
