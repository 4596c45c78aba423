package offloadfs_test

import "hash/crc32"

// crc32c is the checksum offloadfs uses, for tests that forge metadata.
func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }
