package auth

import "github.com/nearstore/nearstore/nvme"

// The Fabrics commands that carry authentication messages (FCTYPE), and
// the security protocol fields of their CDW10 that name DH-HMAC-CHAP:
//
//	byte 40 (CDW10 bits 7:0)    reserved
//	byte 41 (CDW10 bits 15:8)   SPSP0: 01h
//	byte 42 (CDW10 bits 23:16)  SPSP1: 01h
//	byte 43 (CDW10 bits 31:24)  SECP: E9h (NVMe in-band authentication)
//	bytes 44-47 (CDW11)         TL (Send) or AL (Receive): the message's
//	                            length, which the SGL must match
const (
	FabricsAuthSend    = 0x05
	FabricsAuthReceive = 0x06
	SECP               = 0xE9
	spsp               = 0x01
)

// MaxMessage bounds a message either side accepts or asks for: the
// largest is a Reply with SHA-512 and ffdhe8192 (16 + 2*64 + 1024 bytes);
// Linux receives into 4 KiB.
const MaxMessage = 4096

// CommandFields writes an Authentication Send (send) or Receive command
// for a length-byte message into cmd, SGL aside.
func CommandFields(cmd *nvme.Command, send bool, length uint32) {
	cmd.Opcode = nvme.AdminFabrics
	cmd.NSID = FabricsAuthReceive
	if send {
		cmd.NSID = FabricsAuthSend
	}
	cmd.CDW10 = spsp<<8 | spsp<<16 | SECP<<24
	cmd.CDW11 = length
}

// CheckCommand checks an authentication command's security protocol
// fields and returns its length (TL or AL); ok is false if they do not
// name DH-HMAC-CHAP or the length is 0.
func CheckCommand(cmd *nvme.Command) (length uint32, ok bool) {
	if cmd.CDW10>>24 != SECP || cmd.CDW10>>8&0xFF != spsp || cmd.CDW10>>16&0xFF != spsp || cmd.CDW11 == 0 {
		return 0, false
	}
	return cmd.CDW11, true
}
