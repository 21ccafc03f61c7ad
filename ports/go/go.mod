module github.com/kvkey/kvkey/ports/go

go 1.26
