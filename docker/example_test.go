package docker_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/testcontainers/testcontainers-go"

	"github.com/llm-testbed/testbed/docker"
)

// A test starts the mock from the locally built image and talks to it
// through the mapped port. (Needs a Docker daemon, so it is not run here.)
func ExampleStartMock() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m, err := docker.StartMock(ctx, docker.WithArgs("--ttft", "100ms", "--itl", "10ms"))
	defer testcontainers.TerminateContainer(m.Container) // in a test: testcontainers.CleanupContainer(t, m.Container)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("OpenAI-compatible mock at", m.URL+"/v1")
}

// On a GPU host with the image pulled, vLLM on GPU 0, the Hugging Face
// cache shared with the host.
func ExampleStartVLLM() {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	s, err := docker.StartVLLM(ctx, "meta-llama/Llama-3.1-8B-Instruct",
		docker.WithImage(docker.DefaultVLLMImage), docker.WithGPUs("0"),
		docker.WithArgs("--max-model-len", "16384"))
	defer testcontainers.TerminateContainer(s.Container)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("vLLM serving", s.Model, "at", s.URL)
}
