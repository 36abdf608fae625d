package sink

// Rules returns the whole table Classify uses for s's errors, in order,
// for the tests that every row has a case.
func Rules(s Sink) []Rule {
	own := sinkRules(s)
	out := make([]Rule, 0, len(judged)+len(own)+len(generic))
	out = append(out, judged...)
	out = append(out, own...)
	return append(out, generic...)
}
