package nvme

import "fmt"

// Status is the 15-bit Status field of a completion (bits 15:1 of DW3's
// upper half): SC in bits 7:0, SCT in bits 10:8, CRD bits 12:11, More bit 13,
// DNR bit 14.
type Status uint16

// Status code types.
const (
	SCTGeneric         = 0x0
	SCTCommandSpecific = 0x1
	SCTMediaError      = 0x2
	SCTPath            = 0x3
	SCTVendor          = 0x7
)

// DNR is the Do Not Retry bit.
const DNR Status = 1 << 14

// Generic command status values (SCT 0).
const (
	StatusSuccess            Status = 0x00
	StatusInvalidOpcode      Status = 0x01
	StatusInvalidField       Status = 0x02
	StatusCIDConflict        Status = 0x03
	StatusDataTransferError  Status = 0x04
	StatusInternal           Status = 0x06
	StatusAbortRequested     Status = 0x07
	StatusAbortSQDeleted     Status = 0x08
	StatusInvalidNamespace   Status = 0x0B
	StatusCommandSequence    Status = 0x0C
	StatusSGLDataLenInvalid  Status = 0x0F
	StatusSGLTypeInvalid     Status = 0x11
	StatusSGLOffsetInvalid   Status = 0x16
	StatusHostIDInconsistent Status = 0x18
	StatusKATimeoutExpired   Status = 0x19
	StatusKATimeoutInvalid   Status = 0x1A
	StatusTransientTransport Status = 0x22
	// StatusIOCSCombinationRejected: Set Features I/O Command Set Profile
	// named a combination the controller does not offer.
	StatusIOCSCombinationRejected Status = 0x2B
	// StatusInvalidIOCS: the command names an I/O command set that is
	// not supported, or a namespace of another command set than the one
	// it is defined for (Identify CNS 00h or 05h of a KV namespace).
	StatusInvalidIOCS         Status = 0x2C
	StatusLBAOutOfRange       Status = 0x80
	StatusCapacityExceeded    Status = 0x81
	StatusNamespaceNotReady   Status = 0x82
	StatusInvalidQueueID      Status = SCTCommandSpecific<<8 | 0x01
	StatusAbortLimit          Status = SCTCommandSpecific<<8 | 0x03
	StatusAsyncLimit          Status = SCTCommandSpecific<<8 | 0x05
	StatusInvalidLogPage      Status = SCTCommandSpecific<<8 | 0x09
	StatusFeatureNotSaveable  Status = SCTCommandSpecific<<8 | 0x0D
	StatusFeatureNotChangable Status = SCTCommandSpecific<<8 | 0x0E
	// StatusONCSNotSupported is what the Linux target answers for an
	// optional NVM command its backend cannot do (Write Zeroes on a file
	// system without FALLOC_FL_ZERO_RANGE, for one).
	StatusONCSNotSupported Status = SCTCommandSpecific<<8 | 0x83
	// Fabrics Connect command specific statuses.
	StatusConnectIncompatibleFormat Status = SCTCommandSpecific<<8 | 0x80
	StatusConnectControllerBusy     Status = SCTCommandSpecific<<8 | 0x81
	StatusConnectInvalidParameters  Status = SCTCommandSpecific<<8 | 0x82
	StatusConnectInvalidHost        Status = SCTCommandSpecific<<8 | 0x84
	// StatusAuthRequired: the queue must authenticate (DH-HMAC-CHAP)
	// before this command.
	StatusAuthRequired Status = SCTCommandSpecific<<8 | 0x91
	// nearstore's vendor-specific statuses (SCT 7), for its function
	// commands; docs/PROTOCOL.md defines them.
	StatusFunctionRejected   Status = SCTVendor<<8 | 0x01
	StatusFunctionNotFound   Status = SCTVendor<<8 | 0x02
	StatusFunctionTimeout    Status = SCTVendor<<8 | 0x03
	StatusFunctionMemory     Status = SCTVendor<<8 | 0x04
	StatusFunctionOutput     Status = SCTVendor<<8 | 0x05
	StatusFunctionError      Status = SCTVendor<<8 | 0x06
	StatusOutsideFile        Status = SCTVendor<<8 | 0x07
	StatusStepLimit          Status = SCTVendor<<8 | 0x08
	StatusStaleExtentMap     Status = SCTVendor<<8 | 0x09
	StatusBadFunctionRequest Status = SCTVendor<<8 | 0x0A
	StatusBadExtentMap       Status = SCTVendor<<8 | 0x0B
	StatusMetadataLimit      Status = SCTVendor<<8 | 0x0C
	// StatusMediaWriteFault and StatusMediaReadError report backend I/O
	// failures (SCT 2).
	StatusMediaWriteFault Status = SCTMediaError<<8 | 0x80
	StatusMediaReadError  Status = SCTMediaError<<8 | 0x81
	// StatusAccessDenied (SCT 2h, SC 86h): the host may not access the
	// blocks the command names. nearstore's target answers it to a task
	// host outside its grants.
	StatusAccessDenied Status = SCTMediaError<<8 | 0x86
)

// SCT returns the status code type.
func (s Status) SCT() uint8 { return uint8(s>>8) & 7 }

// SC returns the status code.
func (s Status) SC() uint8 { return uint8(s) }

// Code returns SCT and SC without the CRD, More and DNR bits, for comparing
// against the Status* constants.
func (s Status) Code() Status { return s & 0x7ff }

// OK reports whether the status is success.
func (s Status) OK() bool { return s.Code() == StatusSuccess }

// DoNotRetry reports whether the DNR bit is set.
func (s Status) DoNotRetry() bool { return s&DNR != 0 }

// name returns the spec's name for a status code, or "" if unnamed.
func (s Status) name() string {
	switch s.Code() {
	case StatusSuccess:
		return "success"
	case StatusInvalidOpcode:
		return "invalid command opcode"
	case StatusInvalidField:
		return "invalid field in command"
	case StatusCIDConflict:
		return "command ID conflict"
	case StatusDataTransferError:
		return "data transfer error"
	case StatusInternal:
		return "internal error"
	case StatusAbortRequested:
		return "command abort requested"
	case StatusAbortSQDeleted:
		return "command aborted due to SQ deletion"
	case StatusInvalidNamespace:
		return "invalid namespace or format"
	case StatusCommandSequence:
		return "command sequence error"
	case StatusSGLDataLenInvalid:
		return "data SGL length invalid"
	case StatusSGLTypeInvalid:
		return "SGL descriptor type invalid"
	case StatusSGLOffsetInvalid:
		return "SGL offset invalid"
	case StatusHostIDInconsistent:
		return "host identifier inconsistent format"
	case StatusKATimeoutExpired:
		return "keep alive timer expired"
	case StatusKATimeoutInvalid:
		return "keep alive timeout invalid"
	case StatusTransientTransport:
		return "transient transport error"
	case StatusReservationConflict:
		return "reservation conflict"
	case StatusLBAOutOfRange:
		return "LBA out of range"
	case StatusIOCSCombinationRejected:
		return "I/O command set combination rejected"
	case StatusInvalidIOCS:
		return "invalid I/O command set"
	case StatusCapacityExceeded:
		return "capacity exceeded"
	case StatusNamespaceNotReady:
		return "namespace not ready"
	case StatusInvalidQueueID:
		return "invalid queue identifier"
	case StatusAbortLimit:
		return "abort command limit exceeded"
	case StatusAsyncLimit:
		return "asynchronous event request limit exceeded"
	case StatusInvalidLogPage:
		return "invalid log page"
	case StatusFeatureNotSaveable:
		return "feature identifier not saveable"
	case StatusFeatureNotChangable:
		return "feature not changeable"
	case StatusFunctionRejected:
		return "function rejected"
	case StatusFunctionNotFound:
		return "function not found"
	case StatusFunctionTimeout:
		return "function timeout"
	case StatusFunctionMemory:
		return "function memory violation"
	case StatusFunctionOutput:
		return "function output too large"
	case StatusFunctionError:
		return "function returned an error"
	case StatusOutsideFile:
		return "access outside the request's files"
	case StatusStepLimit:
		return "function step limit"
	case StatusStaleExtentMap:
		return "stale extent map"
	case StatusBadFunctionRequest:
		return "malformed function request"
	case StatusBadExtentMap:
		return "bad extent map or grant"
	case StatusMetadataLimit:
		return "extent map or grant limit reached"
	case StatusONCSNotSupported:
		return "optional command not supported"
	case StatusConnectIncompatibleFormat:
		return "connect: incompatible format"
	case StatusConnectControllerBusy:
		return "connect: controller busy"
	case StatusConnectInvalidParameters:
		return "connect: invalid parameters"
	case StatusConnectInvalidHost:
		return "connect: invalid host"
	case StatusAuthRequired:
		return "authentication required"
	case StatusMediaWriteFault:
		return "write fault"
	case StatusMediaReadError:
		return "unrecovered read error"
	case StatusAccessDenied:
		return "access denied"
	}
	return ""
}

// String names the status, with its SCT/SC in hex.
func (s Status) String() string {
	name := s.name()
	if name == "" {
		name = "status"
	}
	str := fmt.Sprintf("%s (sct 0x%x sc 0x%02x)", name, s.SCT(), s.SC())
	if s.DoNotRetry() {
		str += " dnr"
	}
	return str
}

// StatusError is the error a command completes with when its status is not
// success. Callers match a particular status with errors.As and Code.
type StatusError struct {
	Status Status
	Opcode uint8
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nvme: opcode 0x%02x: %s", e.Opcode, e.Status)
}

// Is makes errors.Is(err, &StatusError{Status: x}) match on the status code
// alone, ignoring DNR and the opcode.
func (e *StatusError) Is(target error) bool {
	t, ok := target.(*StatusError)
	return ok && t.Status.Code() == e.Status.Code()
}
