// Package auth holds the pieces of NVMe in-band authentication
// (DH-HMAC-CHAP, NVMe base specification 2.0, Authentication) that host and
// target share: the DHHC-1 secret format of `nvme gen-dhchap-key`, the key
// transformation, the responses each side computes, and the
// authentication messages, encoded and decoded for both sides alike.
//
// It is the codec only: neither nearstore's host nor its target runs the
// protocol yet (docs/SECURITY.md), and only the null DH group is computed
// here; the ffdhe groups are named so that negotiation can refuse them.
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
//	                     ID list (HALEN hash IDs, then DHLEN DH group IDs)
//	Challenge (01h/01h)  6 HL, 7 reserved, 8 hash ID, 9 DH group ID,
//	                     10-11 DHVLEN, 12-15 sequence number S1, then C1
//	                     (HL bytes) and the DH value (DHVLEN bytes)
//	Reply     (01h/02h)  6 HL, 7 reserved, 8 CVALID, 9 reserved,
//	                     10-11 DHVLEN, 12-15 sequence number S2, then the
//	                     response (HL), C2 (HL) and the DH value (DHVLEN)
//	Success1  (01h/03h)  6 HL, 7 reserved, 8 RVALID, 9-15 reserved, then
//	                     the controller's response (HL) if RVALID
//	Success2  (01h/04h)  6-15 reserved
//	Failure1/2 (01h/F1h, F0h)  6 reason code, 7 reason code explanation
package auth
