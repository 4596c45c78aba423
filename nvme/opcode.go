package nvme

// Admin command opcodes (NVMe Base spec, "Admin Command Set").
const (
	AdminGetLogPage   = 0x02
	AdminIdentify     = 0x06
	AdminAbort        = 0x08
	AdminSetFeatures  = 0x09
	AdminGetFeatures  = 0x0A
	AdminAsyncEvent   = 0x0C
	AdminKeepAlive    = 0x18
	AdminFabrics      = 0x7F // fabrics commands share this opcode; FCTYPE says which
	AdminVendorFirst  = 0xC0 // start of the vendor-specific admin range
	AdminVendorLast   = 0xFF
	IOVendorFirst     = 0x80 // start of the vendor-specific NVM (I/O) range
	IOVendorLast      = 0xFF
	maxStandardIOOpcd = 0x7F
)

// nearstore's vendor-specific commands (docs/PROTOCOL.md). Bits 1:0 give
// the data direction as for every opcode.
const (
	AdminFunctionLoad   = 0xC1
	AdminFunctionList   = 0xC2
	AdminFunctionUnload = 0xC5
	// The extent-map and grant commands of offloadfs's synchronizer.
	AdminGrantRelease   = 0xC8 // 00b: the grant ID is in CDW10-11
	AdminExtentMapPut   = 0xC9 // 01b
	AdminExtentMapQuery = 0xCB // 11b: inodes in, versions out
	AdminGrantPut       = 0xCD // 01b
	IOPushdownRead      = 0x83
	IOLambdaRead        = 0x87
	IOLambdaWrite       = 0x85
)

// NVM command set opcodes.
const (
	IOFlush       = 0x00
	IOWrite       = 0x01
	IORead        = 0x02
	IOWriteZeroes = 0x08
	IODSM         = 0x09
)

// Fabrics command types (FCTYPE, byte 4 of a fabrics command).
const (
	FabricsPropertySet = 0x00
	FabricsConnect     = 0x01
	FabricsPropertyGet = 0x04
	FabricsDisconnect  = 0x08
)

// Identify CNS values.
const (
	CNSNamespace     = 0x00
	CNSController    = 0x01
	CNSActiveNSList  = 0x02
	CNSNSDescriptors = 0x03
	// CNSCSNamespace is the I/O command set specific Identify
	// Namespace, of the command set CDW11's CSI names.
	CNSCSNamespace     = 0x05
	CNSCSController    = 0x06 // I/O command set specific controller
	CNSCSActiveNSList  = 0x07
	CNSCSIndependentNS = 0x08
	// CNSIOCommandSets is the I/O Command Set data structure: the command
	// set combinations the controller supports (IOCSVectors).
	CNSIOCommandSets = 0x1C
)

// Feature identifiers.
const (
	FeatArbitration      = 0x01
	FeatPowerManagement  = 0x02
	FeatTempThreshold    = 0x04
	FeatErrorRecovery    = 0x05
	FeatVolatileWC       = 0x06
	FeatNumQueues        = 0x07
	FeatIRQCoalesce      = 0x08
	FeatWriteAtomicity   = 0x0A
	FeatAsyncEventConfig = 0x0B
	FeatTimestamp        = 0x0E
	FeatKeepAliveTimer   = 0x0F
	// FeatIOCSProfile is the I/O Command Set Profile: CDW11 bits 8:0
	// select the index (IOCSCI) of the command set combination CC.CSS =
	// 110b enables.
	FeatIOCSProfile = 0x19
	FeatHostID      = 0x81
)

// Log page identifiers.
const (
	LogError        = 0x01
	LogSMART        = 0x02
	LogFirmwareSlot = 0x03
	LogChangedNS    = 0x04
	LogCmdEffects   = 0x05
	LogDiscovery    = 0x70
)

// Controller property offsets (Property Get/Set).
const (
	PropCAP  = 0x00 // 8 bytes
	PropVS   = 0x08
	PropCC   = 0x14
	PropCSTS = 0x1C
	PropNSSR = 0x20
)

// Controller Configuration (CC) and Status (CSTS) bits.
const (
	CCEnable     = 1 << 0
	CCShnMask    = 3 << 14
	CSTSReady    = 1 << 0
	CSTSFatal    = 1 << 1
	CSTSShstMask = 3 << 2
	// CSTSShstComplete is CSTS.SHST = 10b: shutdown processing complete.
	CSTSShstComplete = 2 << 2
)

// DiscoveryNQN is the well-known NQN of a discovery controller.
const DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

// IsVendorIO reports whether an I/O opcode is in the vendor-specific range
// nearstore's own commands use.
func IsVendorIO(opc uint8) bool { return opc > maxStandardIOOpcd }

// IsVendorAdmin reports whether an admin opcode is vendor specific.
func IsVendorAdmin(opc uint8) bool { return opc >= AdminVendorFirst }

// DataDirection returns the data transfer direction an opcode implies, from
// bits 1:0 of the opcode: 01b host to controller, 10b controller to host,
// 11b both, 00b none. The rule holds for the standard and vendor commands
// alike, which is why nearstore's vendor opcodes are chosen with it in mind.
func DataDirection(opc uint8) Direction { return Direction(opc & 3) }

// Direction is a command's data transfer direction.
type Direction uint8

// Transfer directions, as encoded in opcode bits 1:0.
const (
	DirNone          Direction = 0
	DirHostToCtrl    Direction = 1
	DirCtrlToHost    Direction = 2
	DirBidirectional Direction = 3
)
