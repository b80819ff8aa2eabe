package harness_test

import (
	"encoding/pem"
	"net/http/httptest"
	"os"
	"testing"
)

// writeCA saves the test server's certificate as a PEM CA file.
func writeCA(t *testing.T, srv *httptest.Server, path string) {
	t.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
