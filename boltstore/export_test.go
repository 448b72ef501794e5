package boltstore

// hooks returns the test hooks of a store the test helpers opened
// (MustOpenStoreAt, mustOpenLimits), which are in place before its
// committer starts. Set them before the writes they are to see: the
// committer reads them as it takes a request.
func (s *Store) hooks() *testHooks {
	if s.test == nil {
		panic("boltstore: the store was opened without test hooks; open it with MustOpenStoreAt or mustOpenLimits")
	}
	return s.test
}
