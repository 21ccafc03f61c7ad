// SPDX-License-Identifier: Apache-2.0

// Package xxh3 is XXH3-128 (xxHash 0.8, default secret, seed 0), the digest
// of plain envelopes (docs/format.md, section 6), ported from the reference
// xxhash.h. The tests use it to check the committed envelopes' digests
// independently of the C++ library.
package xxh3

import (
	"encoding/binary"
	"math/bits"
)

const (
	prime32_1 = 0x9E3779B1
	prime32_2 = 0x85EBCA77
	prime32_3 = 0xC2B2AE3D
	prime64_1 = 0x9E3779B185EBCA87
	prime64_2 = 0xC2B2AE3D27D4EB4F
	prime64_3 = 0x165667B19E3779F9
	prime64_4 = 0x85EBCA77C2B2AE63
	prime64_5 = 0x27D4EB2F165667C5
)

var secret = [192]byte{
	0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
	0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
	0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
	0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
	0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
	0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
	0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
	0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
	0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
	0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
	0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
	0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
}

func le32(b []byte) uint64 { return uint64(binary.LittleEndian.Uint32(b)) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

func avalanche64(h uint64) uint64 { // XXH64_avalanche
	h ^= h >> 33
	h *= prime64_2
	h ^= h >> 29
	h *= prime64_3
	return h ^ h>>32
}

func avalanche(h uint64) uint64 { // XXH3_avalanche
	h ^= h >> 37
	h *= 0x165667919E3779F9
	return h ^ h>>32
}

func mulFold64(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func mix16(in, sec []byte) uint64 { return mulFold64(le64(in)^le64(sec), le64(in[8:])^le64(sec[8:])) }

// mix32 is XXH128_mix32B with seed 0 (seed only enters as 0 or -0).
func mix32(lo, hi uint64, in1, in2, sec []byte) (uint64, uint64) {
	lo += mix16(in1, sec)
	lo ^= le64(in2) + le64(in2[8:])
	hi += mix16(in2, sec[16:])
	hi ^= le64(in1) + le64(in1[8:])
	return lo, hi
}

// Sum128 returns XXH3-128 of b in canonical form: the high 64 bits, then the
// low 64 bits, each big-endian (what xxh128sum prints).
func Sum128(b []byte) (out [16]byte) {
	hi, lo := sum128(b)
	binary.BigEndian.PutUint64(out[:8], hi)
	binary.BigEndian.PutUint64(out[8:], lo)
	return out
}

func sum128(in []byte) (hi, lo uint64) {
	n := uint64(len(in))
	switch {
	case n == 0:
		return avalanche64(le64(secret[80:]) ^ le64(secret[88:])), avalanche64(le64(secret[64:]) ^ le64(secret[72:]))
	case n <= 3:
		c1, c2, c3 := uint32(in[0]), uint32(in[n>>1]), uint32(in[n-1])
		combinedl := c1<<16 | c2<<24 | c3 | uint32(n)<<8
		combinedh := bits.RotateLeft32(bits.ReverseBytes32(combinedl), 13)
		keyedLo := uint64(combinedl) ^ (le32(secret[:]) ^ le32(secret[4:]))
		keyedHi := uint64(combinedh) ^ (le32(secret[8:]) ^ le32(secret[12:]))
		return avalanche64(keyedHi), avalanche64(keyedLo)
	case n <= 8:
		input64 := le32(in) + le32(in[n-4:])<<32
		keyed := input64 ^ (le64(secret[16:]) ^ le64(secret[24:]))
		mhi, mlo := bits.Mul64(keyed, prime64_1+n<<2)
		mhi += mlo << 1
		mlo ^= mhi >> 3
		mlo ^= mlo >> 35
		mlo *= 0x9FB21C651E98DF25
		mlo ^= mlo >> 28
		return avalanche(mhi), mlo
	case n <= 16:
		bitflipl := le64(secret[32:]) ^ le64(secret[40:])
		bitfliph := le64(secret[48:]) ^ le64(secret[56:])
		inLo, inHi := le64(in), le64(in[n-8:])
		mhi, mlo := bits.Mul64(inLo^inHi^bitflipl, prime64_1)
		mlo += (n - 1) << 54
		inHi ^= bitfliph
		mhi += inHi + uint64(uint32(inHi))*(prime32_2-1)
		mlo ^= bits.ReverseBytes64(mhi)
		hhi, hlo := bits.Mul64(mlo, prime64_2)
		hhi += mhi * prime64_2
		return avalanche(hhi), avalanche(hlo)
	case n <= 128:
		alo, ahi := n*prime64_1, uint64(0)
		if n > 32 {
			if n > 64 {
				if n > 96 {
					alo, ahi = mix32(alo, ahi, in[48:], in[n-64:], secret[96:])
				}
				alo, ahi = mix32(alo, ahi, in[32:], in[n-48:], secret[64:])
			}
			alo, ahi = mix32(alo, ahi, in[16:], in[n-32:], secret[32:])
		}
		alo, ahi = mix32(alo, ahi, in, in[n-16:], secret[:])
		return finish(alo, ahi, n)
	case n <= 240:
		alo, ahi := n*prime64_1, uint64(0)
		for i := 0; i < 4; i++ {
			alo, ahi = mix32(alo, ahi, in[32*i:], in[32*i+16:], secret[32*i:])
		}
		alo, ahi = avalanche(alo), avalanche(ahi)
		for i := 4; i < int(n)/32; i++ {
			alo, ahi = mix32(alo, ahi, in[32*i:], in[32*i+16:], secret[3+32*(i-4):])
		}
		alo, ahi = mix32(alo, ahi, in[n-16:], in[n-32:], secret[136-17-16:])
		return finish(alo, ahi, n)
	}
	return long(in)
}

func finish(alo, ahi, n uint64) (hi, lo uint64) {
	lo = avalanche(alo + ahi)
	hi = -avalanche(alo*prime64_1 + ahi*prime64_4 + n*prime64_2)
	return hi, lo
}

func accumulate512(acc *[8]uint64, in, sec []byte) {
	for i := 0; i < 8; i++ {
		v := le64(in[8*i:])
		k := v ^ le64(sec[8*i:])
		acc[i^1] += v
		acc[i] += (k & 0xFFFFFFFF) * (k >> 32)
	}
}

func scramble(acc *[8]uint64, sec []byte) {
	for i := 0; i < 8; i++ {
		a := acc[i]
		a ^= a >> 47
		a ^= le64(sec[8*i:])
		acc[i] = a * prime32_1
	}
}

func mergeAccs(acc *[8]uint64, sec []byte, start uint64) uint64 {
	r := start
	for i := 0; i < 4; i++ {
		r += mulFold64(acc[2*i]^le64(sec[16*i:]), acc[2*i+1]^le64(sec[16*i+8:]))
	}
	return avalanche(r)
}

func long(in []byte) (hi, lo uint64) {
	acc := [8]uint64{prime32_3, prime64_1, prime64_2, prime64_3, prime64_4, prime32_2, prime64_5, prime32_1}
	const stripesPerBlock = (len(secret) - 64) / 8
	const blockLen = 64 * stripesPerBlock
	n := len(in)
	blocks := (n - 1) / blockLen
	for b := 0; b < blocks; b++ {
		for s := 0; s < stripesPerBlock; s++ {
			accumulate512(&acc, in[b*blockLen+s*64:], secret[s*8:])
		}
		scramble(&acc, secret[len(secret)-64:])
	}
	stripes := ((n - 1) - blockLen*blocks) / 64
	for s := 0; s < stripes; s++ {
		accumulate512(&acc, in[blocks*blockLen+s*64:], secret[s*8:])
	}
	accumulate512(&acc, in[n-64:], secret[len(secret)-64-7:])
	lo = mergeAccs(&acc, secret[11:], uint64(n)*prime64_1)
	hi = mergeAccs(&acc, secret[len(secret)-64-11:], ^(uint64(n) * prime64_2))
	return hi, lo
}
