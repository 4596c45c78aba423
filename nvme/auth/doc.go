// Package auth is NVMe in-band authentication (DH-HMAC-CHAP, NVMe base
// specification 2.0, Authentication) for host and target alike: the
// DHHC-1 secret format of `nvme gen-dhchap-key`, the key transformation,
// the responses each side computes, the RFC 7919 Diffie-Hellman groups,
// the authentication messages, and the protocol itself as two pure state
// machines (Host, Controller) fed messages and returning messages, with
// no I/O: nearstore's host and target carry what they return in
// Authentication Send and Receive commands (CommandFields).
//
// What each side computes, as Linux's drivers/nvme/common/auth.c does
// (the tests check it against an independent implementation):
//
//	Kh  = HMAC(T, secret, NQN || "NVMe-over-Fabrics"), or the secret
//	      itself when the DHHC-1 transformation T is 00; the host's
//	      secret for the host NQN, the controller's for the subsystem NQN
//	Ca  = HMAC(H, H(g^xy mod p), C) with a DH group, else C
//	R1  = HMAC(H, Kh, Ca1 || S1 || T_ID || 00h || "HostHost" ||
//	      host NQN || 00h || subsystem NQN)
//	R2  = HMAC(H, Kc, Ca2 || S2 || T_ID || 00h || "Controller" ||
//	      subsystem NQN || 00h || host NQN)
//
// with H the hash the controller chose from the host's offer, and DH
// values (public values, g^xy) big endian, padded to the modulus's size.
//
// Message layouts (all little endian), common header:
//
//	byte 0     auth_type: 00h common messages, 01h DH-HMAC-CHAP messages
//	byte 1     auth_id: the message
//	bytes 2-3  reserved
//	bytes 4-5  T_ID, the transaction
//
// then, by message:
//
//	Negotiate (00h/00h)  6 SC_C, 7 NAPD, then NAPD 64-byte descriptors:
//	                     AUTHID (01h), reserved, HALEN, DHLEN, 60-byte
//	                     ID list (HALEN hash IDs from its byte 0, DHLEN
//	                     DH group IDs from its byte 30)
//	Challenge (01h/01h)  6 HL, 7 reserved, 8 hash ID, 9 DH group ID,
//	                     10-11 DHVLEN, 12-15 sequence number S1, then C1
//	                     (HL bytes) and the DH value (DHVLEN bytes)
//	Reply     (01h/02h)  6 HL, 7 reserved, 8 CVALID, 9 reserved,
//	                     10-11 DHVLEN, 12-15 sequence number S2, then the
//	                     response (HL), C2 (HL) and the DH value (DHVLEN)
//	Success1  (01h/03h)  6 HL, 7 reserved, 8 RVALID, 9-15 reserved, then
//	                     the controller's response (HL) if RVALID
//	Success2  (01h/04h)  6-15 reserved
//	Failure2, Failure1 (00h/F0h, 00h/F1h)  6 reason code (01h),
//	                     7 reason code explanation (Reason*)
//
// Not implemented: secure channel concatenation (SC_C, the TLS PSK
// derived from the exchange), which needs NVMe/TCP TLS; a Negotiate
// asking for it fails with ReasonConcatMismatch.
package auth
