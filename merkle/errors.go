package merkle

import "errors"

// Sentinel errors. Errors returned by this package wrap one of these (test
// with [errors.Is]) and add the details.
var (
	// ErrInvalidProof means a proof does not prove what it was checked
	// against: a hash mismatch or a proof of the wrong length.
	ErrInvalidProof = errors.New("merkle: invalid proof")

	// ErrIndexOutOfRange means a leaf index is not below the tree size.
	ErrIndexOutOfRange = errors.New("merkle: index out of range")

	// ErrSizeOutOfRange means a tree size is larger than the tree, or the
	// sizes of a consistency proof are in the wrong order.
	ErrSizeOutOfRange = errors.New("merkle: size out of range")

	// ErrMalformedHash means a string is not 64 hexadecimal digits.
	ErrMalformedHash = errors.New("merkle: malformed hash")

	// ErrMalformedLine means a log file line is not one of the three line
	// kinds. OpenLogFile and ReadLogFile wrap it in a *LineError.
	ErrMalformedLine = errors.New("merkle: malformed log line")

	// ErrLineTooLong means a log file line exceeds MaxLineSize.
	ErrLineTooLong = errors.New("merkle: log line too long")

	// ErrTornLine means the last line of a log file is incomplete, as a
	// crash in the middle of an append leaves it. ReadLogFile reports it;
	// OpenLogFile and PruneLogFile repair it.
	ErrTornLine = errors.New("merkle: torn last line")

	// ErrInvalidLeaf means a leaf cannot be written to a log file (it is not
	// valid UTF-8) or an Entry is inconsistent (its Hash is not the leaf hash
	// of its Leaf).
	ErrInvalidLeaf = errors.New("merkle: invalid leaf")

	// ErrCorruptStore means a HashStore is inconsistent, or holds leaf
	// hashes that disagree with the log file it is opened with.
	ErrCorruptStore = errors.New("merkle: corrupt hash store")

	// ErrLocked means another LogFile, FileStore or PruneLogFile, in this
	// process or another, holds the file.
	ErrLocked = errors.New("merkle: file is locked by another user")

	// ErrClosed means the LogFile or HashStore was closed.
	ErrClosed = errors.New("merkle: closed")
)
