// SPDX-License-Identifier: Apache-2.0

package kvkey

import (
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

const (
	examplesDir = "../../examples/identities/"
	badFilesDir = "../../tools/tests/data/"
)

// The files the kvkey tool's tests refuse, with the kind and field its
// reader names (tools/tests/cli_test.py, test_config_errors).
func TestLoadIdentityErrorsNameTheField(t *testing.T) {
	for name, want := range map[string]struct {
		kind  ErrorKind
		field string
	}{
		"bad-syntax.json":           {InputErrorKind, "identity_file"},
		"unknown-key.json":          {InputErrorKind, "kv.blocksize"},
		"unknown-top-key.json":      {InputErrorKind, "colour"},
		"unknown-dtype.json":        {InputErrorKind, "kv.dtype"},
		"bad-hex.json":              {InputErrorKind, "model.weights_fingerprint"},
		"wrong-type.json":           {InputErrorKind, "kv.block_size"},
		"missing-key.json":          {InputErrorKind, "model.revision"},
		"missing-weights-file.json": {InputErrorKind, "adapter.weights_file"},
		"duplicate-key.json":        {InputErrorKind, "kv.dtype"},
		"bad-geometry.json":         {IdentityErrorKind, "shard.tp_size"},
		"bad-tenant.json":           {IdentityErrorKind, "tenant"},
	} {
		f, err := LoadIdentity(badFilesDir + name)
		if err == nil {
			_, err = f.NewNamespace()
		}
		if !hasField(err, want.kind, want.field) {
			t.Errorf("%s: got %v, want %s on %q", name, err, want.kind, want.field)
		}
	}
}

func TestExampleIdentityFiles(t *testing.T) {
	names, _ := filepath.Glob(examplesDir + "*.json")
	if len(names) < 10 {
		t.Fatalf("examples: %v", names)
	}
	for _, name := range names {
		f, err := LoadIdentity(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if _, err := f.NewNamespace(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		// The writer's output reads back as the same identity and policy.
		text, _ := json.Marshal(f)
		back, err := ParseIdentity(text)
		if err != nil || !reflect.DeepEqual(back, f) {
			t.Errorf("%s: %s read back as %+v, %v", name, text, back, err)
		}
		var viaJSON IdentityFile
		if err := json.Unmarshal(text, &viaJSON); err != nil || !reflect.DeepEqual(&viaJSON, f) {
			t.Errorf("%s: json.Unmarshal: %+v, %v", name, viaJSON, err)
		}
	}
	// The base example is the README's identity; lora.json's adapter
	// fingerprint is the SHA-256 of the file it names, relative to the file.
	base, _ := LoadIdentity(examplesDir + "qwen-fp16.json")
	readme := Identity{Tenant: "team-a",
		Model: Model{Name: "Qwen2.5-0.5B-Instruct", Revision: "7ae557604adf67be50417f59c2c2f167def9a775"},
		KV:    KV{DType: FP16, BlockSize: 64, NumLayers: 24, NumKVHeads: 2, HeadDim: 64, Layout: "lmdeploy.mooncake.v1"}}
	a, _ := base.NewNamespace()
	b, err := NewNamespace(readme)
	if err != nil || a.Root() != b.Root() {
		t.Errorf("qwen-fp16.json: root %s, the README identity's %v %v", a.Root(), b, err)
	}
	lora, _ := LoadIdentity(examplesDir + "lora.json")
	weights, _ := os.ReadFile(examplesDir + "adapter-weights.txt")
	if lora.Identity.Adapter == nil || lora.Identity.Adapter.WeightsFingerprint != sha256.Sum256(weights) {
		t.Errorf("lora.json: adapter %+v", lora.Identity.Adapter)
	}
	single, _ := LoadIdentity(examplesDir + "single-tenant.json")
	if ns, err := single.NewNamespace(); !single.SingleTenant || err != nil || ns.Identity().Tenant != SingleTenantName {
		t.Errorf("single-tenant.json: %+v %v", single, err)
	}
}

const minimalFile = `{"tenant":"t","model":{"name":"m","revision":"r"},` +
	`"kv":{"dtype":"fp16","block_size":4,"num_layers":2,"num_kv_heads":2,"head_dim":8,"layout":"l"}}`

func TestParseIdentityRefusesWhatJSONDoesNotSay(t *testing.T) {
	for _, c := range []struct{ text, field string }{
		{strings.Replace(minimalFile, `"m"`, "\"m\xff\"", 1), "identity_file"},
		{strings.Replace(minimalFile, `"m"`, `"m\ud800"`, 1), "identity_file"},
		{minimalFile + ` {}`, "identity_file"},
		{strings.Replace(minimalFile, `"head_dim":8`, `"head_dim":1e400`, 1), "identity_file"},
		{strings.Replace(minimalFile, `"head_dim":8`, `"head_dim":8.0`, 1), "kv.head_dim"},
		{strings.Replace(minimalFile, `"head_dim":8`, `"head_dim":4294967296`, 1), "kv.head_dim"},
		{strings.Replace(minimalFile, `"head_dim":8`, `"head_dim":-0`, 1), "kv.head_dim"},
		{strings.Replace(minimalFile, `"head_dim":8`, `"head_dim":8,"head_dim":8`, 1), "kv.head_dim"},
		{strings.Replace(minimalFile, `{"tenant"`, `{"zz":1,"aa":2,"tenant"`, 1), "aa"},
		{strings.Replace(minimalFile, `"head_dim"`, `"zz":1,"aa":2,"head_dim"`, 1), "kv.aa"},
		{strings.Replace(minimalFile, `"tenant":"t"`, `"tenant":"t","policy":"shared"`, 1), "policy"},
		{strings.Replace(minimalFile, `"layout":"l"`, `"layout":"l","quant":[]`, 1), "kv.quant"},
		{strings.Repeat("[", 40) + strings.Repeat("]", 40), "identity_file"},
		{`[]`, "identity_file"},
	} {
		_, err := ParseIdentity([]byte(c.text))
		if !hasField(err, InputErrorKind, c.field) {
			t.Errorf("%.80q...: got %v, want an input error on %q", c.text, err, c.field)
		}
	}
	f, err := ParseIdentity([]byte("\xef\xbb\xbf" + minimalFile))
	if err != nil || f.Identity.KV.Quant.Scheme != "none" || f.Identity.Shard != (Shard{TPSize: 1, PPSize: 1}) {
		t.Errorf("defaults: %+v %v", f, err)
	}
}

// json.Unmarshal into an Identity reads an identity file by the same rules.
func TestJSONUnmarshalIdentity(t *testing.T) {
	var id Identity
	if err := json.Unmarshal([]byte(minimalFile), &id); err != nil {
		t.Fatal(err)
	}
	f, _ := ParseIdentity([]byte(minimalFile))
	if !reflect.DeepEqual(id, f.Identity) {
		t.Errorf("json.Unmarshal: %+v, ParseIdentity: %+v", id, f.Identity)
	}
	bad := strings.Replace(minimalFile, `"block_size":4`, `"block_sise":4`, 1)
	if err := json.Unmarshal([]byte(bad), &id); !hasField(err, InputErrorKind, "kv.block_sise") {
		t.Errorf("unknown key: %v", err)
	}
	bad = strings.Replace(minimalFile, `"block_size":4`, `"block_size":0`, 1)
	if err := json.Unmarshal([]byte(bad), &id); !hasField(err, IdentityErrorKind, "kv.block_size") {
		t.Errorf("invalid identity: %v", err)
	}
	var d DType
	if err := json.Unmarshal([]byte(`"fp8_e4m3"`), &d); err != nil || d != FP8E4M3 {
		t.Errorf("DType: %v %v", d, err)
	}
	if err := json.Unmarshal([]byte(`"fp17"`), &d); err == nil {
		t.Errorf("DType fp17 accepted")
	}
}

func TestLoadIdentityRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, fifo, filepath.Join(dir, "absent.json")} {
		if _, err := LoadIdentity(path); !hasField(err, InputErrorKind, "identity_file") {
			t.Errorf("%s: %v", path, err)
		}
	}
	big := filepath.Join(dir, "big.json")
	os.WriteFile(big, []byte(minimalFile+strings.Repeat(" ", MaxIdentityFileSize)), 0o600)
	if _, err := LoadIdentity(big); !hasField(err, InputErrorKind, "identity_file") {
		t.Errorf("a file over 1 MiB: %v", err)
	}
	withFifo := filepath.Join(dir, "with-fifo.json")
	os.WriteFile(withFifo, []byte(strings.Replace(minimalFile, `"revision":"r"`,
		`"revision":"r","weights_file":"fifo"`, 1)), 0o600)
	if _, err := LoadIdentity(withFifo); !hasField(err, InputErrorKind, "model.weights_file") {
		t.Errorf("weights_file naming a FIFO: %v", err)
	}
}
