module github.com/kvkey/kvkey/ports/go

go 1.26.0

require (
	github.com/zeebo/xxh3 v1.1.0
	golang.org/x/crypto v0.59.0
)

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
