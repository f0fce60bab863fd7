# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
differentiable graphics.

- 2D Gaussian splatting as OutofAi/2D-Gaussian-Splatting writes it (the notebook's script):
  ``generate_2D_gaussian_splatting`` (covariances by nested ``torch.stack``, ``torch.inverse``
  and ``torch.det`` of a batch of 2x2 matrices, ``torch.einsum('b...i,b...ij,b...j->b...')``,
  ``kernel.max(dim=-1, keepdim=True)`` twice, ``repeat(1, 3, 1).view(...)``, ``F.pad``, a
  ``theta`` written by ``theta[:, :, 2] = coords`` that carries the gradient, ``F.affine_grid``
  and ``F.grid_sample`` with ``align_corners=True``), the SSIM of ``create_window`` (``torch.
  autograd.Variable``, ``window.type_as``, ``img1.is_cuda``) by grouped ``F.conv2d``, the
  ``nn.L1Loss`` + D-SSIM loss, and the training loop with its densification: one ``nn.Parameter``
  ``W`` indexed by a boolean ``persistent_mask``, ``W.grad.data[~persistent_mask] = 0.0`` before
  ``optimizer.step()``, pruning by ``(...).nonzero(as_tuple=True)[0]``, splitting and cloning by
  ``torch.sort(..., descending=True)``, ``torch.isin`` and ``W.data[a:b, :] = W.data[indices,
  :]`` / ``W.data[indices, 0:2] /= 1.6``, ``torch.cuda.empty_cache()``.

The image (``Image.open(...)``, resized) is a small synthetic one made by the test; the sizes
are small (a 9-pixel kernel on a 16x16 image, 10 + 30 Gaussians, 8 epochs, densifying every 3);
the plotting and video cells and the per-epoch ``gc.collect()`` (a
full collection costs a second an epoch under pytest) are left out and the statistics file is written under pytest's
``tmp_path``. ``np.random.randint`` and ``torch.rand`` draw from one seeded stream in both runs.
The lines changed: the gradient lines (``grads = loss.backward()``, ``W.grad(grads)`` for
``W.grad``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, runs_with_draws

SPLAT_SOURCE = r"""
import numpy as np
import torch.nn.functional as F
import torch.nn as nn
import torch
import gc
import os
from torch.optim import Adam

# Parameters
KERNEL_SIZE = 9 # 101
image_size = [16, 16, 3] # 256, 256, 3
primary_samples = 10 # initial number of Gaussians
backup_samples = 30 # number of Gaussians that can be added
num_epochs = 8 # 2001
densification_interval = 3 # 300
learning_rate = 0.01
display_interval = 20
gradient_threshold = 0.002 # refers to the norm of the gradient of the Gaussians coordinates
gaussian_threshold = 0.002 # refers to the norm of the Gaussian variances 
display_loss = True
directory = output_directory
os.makedirs(directory, exist_ok=True)
stat_path = os.path.join(directory, 'statistics.txt')

with open(stat_path, 'w') as f:
    f.write("OPTIMIZATION PARAMETERS\n")
    f.write(f"Kernel Size: {KERNEL_SIZE}\n")
    f.write(f"Image Size: {image_size}\n")
    f.write(f"Primary Samples: {primary_samples}\n")
    f.write(f"Backup Samples: {backup_samples}\n")
    f.write(f"Number of Epochs: {num_epochs}\n")
    f.write(f"Densification Interval: {densification_interval}\n")
    f.write(f"Learning Rate: {learning_rate}\n")
    f.write(f"Display Interval: {display_interval}\n")
    f.write(f"Gradient Threshold: {gradient_threshold}\n")
    f.write(f"Gaussian Threshold: {gaussian_threshold}\n\nSTATISTICS:\n")

# Densification variables
common_indices = []
distinct_indices = []

def generate_2D_gaussian_splatting(kernel_size, sigma_x, sigma_y, rho, coords, colours, image_size=(256, 256, 3), device="cpu"):

    batch_size = colours.shape[0]

    sigma_x = sigma_x.view(batch_size, 1, 1)
    sigma_y = sigma_y.view(batch_size, 1, 1)
    rho = rho.view(batch_size, 1, 1)

    covariance = torch.stack(
        [torch.stack([sigma_x**2, rho*sigma_x*sigma_y], dim=-1),
        torch.stack([rho*sigma_x*sigma_y, sigma_y**2], dim=-1)],
        dim=-2
    )

    # Check for positive semi-definiteness
    determinant = (sigma_x**2) * (sigma_y**2) - (rho * sigma_x * sigma_y)**2
    if (determinant <= 0).any():
        raise ValueError("Covariance matrix must be positive semi-definite")

    inv_covariance = torch.inverse(covariance)

    # Choosing quite a broad range for the distribution [-5,5] to avoid any clipping
    start = torch.tensor([-5.0], device=device).view(-1, 1)
    end = torch.tensor([5.0], device=device).view(-1, 1)
    base_linspace = torch.linspace(0, 1, steps=kernel_size, device=device)
    ax_batch = start + (end - start) * base_linspace

    # Expanding dims for broadcasting
    ax_batch_expanded_x = ax_batch.unsqueeze(-1).expand(-1, -1, kernel_size)
    ax_batch_expanded_y = ax_batch.unsqueeze(1).expand(-1, kernel_size, -1)

    # Creating a batch-wise meshgrid using broadcasting
    xx, yy = ax_batch_expanded_x, ax_batch_expanded_y

    xy = torch.stack([xx, yy], dim=-1)
    z = torch.einsum('b...i,b...ij,b...j->b...', xy, -0.5 * inv_covariance, xy)
    kernel = torch.exp(z) / (2 * torch.tensor(np.pi, device=device) * torch.sqrt(torch.det(covariance)).view(batch_size, 1, 1))


    kernel_max_1, _ = kernel.max(dim=-1, keepdim=True)  # Find max along the last dimension
    kernel_max_2, _ = kernel_max_1.max(dim=-2, keepdim=True)  # Find max along the second-to-last dimension
    kernel_normalized = kernel / kernel_max_2

    kernel_reshaped = kernel_normalized.repeat(1, 3, 1).view(batch_size * 3, kernel_size, kernel_size)
    kernel_rgb = kernel_reshaped.unsqueeze(0).reshape(batch_size, 3, kernel_size, kernel_size)

    # Calculating the padding needed to match the image size
    pad_h = image_size[0] - kernel_size
    pad_w = image_size[1] - kernel_size

    if pad_h < 0 or pad_w < 0:
        raise ValueError("Kernel size should be smaller or equal to the image size.")

    # Adding padding to make kernel size equal to the image size
    padding = (pad_w // 2, pad_w // 2 + pad_w % 2,  # padding left and right
               pad_h // 2, pad_h // 2 + pad_h % 2)  # padding top and bottom

    kernel_rgb_padded = torch.nn.functional.pad(kernel_rgb, padding, "constant", 0)

    # Extracting shape information
    b, c, h, w = kernel_rgb_padded.shape

    # Create a batch of 2D affine matrices
    theta = torch.zeros(b, 2, 3, dtype=torch.float32, device=device)
    theta[:, 0, 0] = 1.0
    theta[:, 1, 1] = 1.0
    theta[:, :, 2] = coords

    # Creating grid and performing grid sampling
    grid = F.affine_grid(theta, size=(b, c, h, w), align_corners=True)
    kernel_rgb_padded_translated = F.grid_sample(kernel_rgb_padded, grid, align_corners=True)

    rgb_values_reshaped = colours.unsqueeze(-1).unsqueeze(-1)

    final_image_layers = rgb_values_reshaped * kernel_rgb_padded_translated
    final_image = final_image_layers.sum(dim=0)
    final_image = torch.clamp(final_image, 0, 1)
    final_image = final_image.permute(1,2,0)

    return final_image

def create_window(window_size, channel):
    def gaussian(window_size, sigma):
        gauss = torch.exp(torch.tensor([-(x - window_size//2)**2/float(2*sigma**2) for x in range(window_size)]))
        return gauss/gauss.sum()

    _1D_window = gaussian(window_size, 1.5).unsqueeze(1)
    _2D_window = _1D_window.mm(_1D_window.t()).float().unsqueeze(0).unsqueeze(0)
    window = torch.autograd.Variable(_2D_window.expand(channel, 1, window_size, window_size).contiguous())

    return window



def ssim(img1, img2, window_size=11, size_average=True):


    # Assuming the image is of shape [N, C, H, W]
    (_, _, channel) = img1.size()

    img1 = img1.unsqueeze(0).permute(0, 3, 1, 2)
    img2 = img2.unsqueeze(0).permute(0, 3, 1, 2)


    # Parameters for SSIM
    C1 = 0.01**2
    C2 = 0.03**2

    window = create_window(window_size, channel)

    if img1.is_cuda:
        window = window.cuda(img1.get_device())
    window = window.type_as(img1)

    mu1 = F.conv2d(img1, window, padding=window_size//2, groups=channel)
    mu2 = F.conv2d(img2, window, padding=window_size//2, groups=channel)
    mu1_sq = mu1.pow(2)
    mu2_sq = mu2.pow(2)
    mu1_mu2 = mu1 * mu2

    sigma1_sq = F.conv2d(img1*img1, window, padding=window_size//2, groups=channel) - mu1_sq
    sigma2_sq = F.conv2d(img2*img2, window, padding=window_size//2, groups=channel) - mu2_sq
    sigma12 = F.conv2d(img1*img2, window, padding=window_size//2, groups=channel) - mu1_mu2

    SSIM_numerator = ((2*mu1_mu2 + C1)*(2*sigma12 + C2))
    SSIM_denominator = ((mu1_sq + mu2_sq + C1)*(sigma1_sq + sigma2_sq + C2))
    SSIM = SSIM_numerator / SSIM_denominator

    return torch.clamp((1 - SSIM) / 2, 0, 1)

def d_ssim_loss(img1, img2, window_size=11, size_average=True):
    return ssim(img1, img2, window_size, size_average).mean()

# Combined Loss
def combined_loss(pred, target, lambda_param=0.5):
    l1loss = nn.L1Loss()
    return (1 - lambda_param) * l1loss(pred, target) + lambda_param * d_ssim_loss(pred, target)

def give_required_data(input_coords, image_size):

  # normalising pixel coordinates [-1,1]
  coords = torch.tensor(input_coords / [image_size[0],image_size[1]], device=device).float()
  center_coords_normalized = torch.tensor([0.5, 0.5], device=device).float()
  coords = (center_coords_normalized - coords) * 2.0

  # Fetching the colour of the pixels in each coordinates
  colour_values = [image_array[coord[1], coord[0]] for coord in input_coords]
  colour_values_np = np.array(colour_values)
  colour_values_tensor =  torch.tensor(colour_values_np, device=device).float()

  return colour_values_tensor, coords

device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
num_samples = primary_samples + backup_samples

PADDING = KERNEL_SIZE // 2
original_array = synthetic_image
width, height, _ = original_array.shape

image_array = original_array
target_tensor = torch.tensor(image_array, dtype=torch.float32, device=device)
coords = np.random.randint(0, [width, height], size=(num_samples, 2))
random_pixel_means = torch.tensor(coords, device=device)
pixels = [image_array[coord[0], coord[1]] for coord in coords]
pixels_np = np.array(pixels)
random_pixels =  torch.tensor(pixels_np, device=device)

colour_values, pixel_coords = give_required_data(coords, image_size)

pixel_coords = torch.atanh(pixel_coords)

sigma_values = torch.rand(num_samples, 2, device=device)
rho_values = 2 * torch.rand(num_samples, 1, device=device) - 1
alpha_values = torch.ones(num_samples, 1, device=device)
W_values = torch.cat([sigma_values, rho_values, alpha_values, colour_values, pixel_coords], dim=1) # parameters to be optimised

starting_size = primary_samples
left_over_size = backup_samples
# mask of gaussians that are active or disabled
persistent_mask = torch.cat([torch.ones(starting_size, dtype=bool),torch.zeros(left_over_size, dtype=bool)], dim=0)
current_marker = starting_size

W = nn.Parameter(W_values)
optimizer = Adam([W], lr=learning_rate)
loss_history = []

print("Training started")
for epoch in range(num_epochs):
  
    #find indices to remove and update the persistent mask
    if epoch % (densification_interval + 1) == 0 and epoch > 0:
        indices_to_remove = (torch.sigmoid(W[:, 3]) < 0.01).nonzero(as_tuple=True)[0]

        if len(indices_to_remove) > 0:
          with open(stat_path, 'a') as f:
            f.write(f"number of pruned points: {len(indices_to_remove)}\n")

        persistent_mask[indices_to_remove] = False

        # Zero-out parameters and their gradients at every epoch using the persistent mask
        W.data[~persistent_mask] = 0.0

  
    torch.cuda.empty_cache()

    output = W[persistent_mask]

    batch_size = output.shape[0]

    # activation function for each parameter
    sigma_x = torch.sigmoid(output[:, 0])
    sigma_y = torch.sigmoid(output[:, 1])
    rho = torch.tanh(output[:, 2])
    alpha = torch.sigmoid(output[:, 3])
    colours = torch.sigmoid(output[:, 4:7])
    pixel_coords = torch.tanh(output[:, 7:9])

    colours_with_alpha  = colours * alpha.view(batch_size, 1)
    g_tensor_batch = generate_2D_gaussian_splatting(KERNEL_SIZE, sigma_x, sigma_y, rho, pixel_coords, colours_with_alpha, image_size, device)
    loss = combined_loss(g_tensor_batch, target_tensor, lambda_param=0.2)

    optimizer.zero_grad()

    loss.backward()

    # Apply zeroing out of gradients at every epoch
    if persistent_mask is not None:
        W.grad.data[~persistent_mask] = 0.0

    if epoch % densification_interval == 0 and epoch > 0:

      # Calculate the norm of gradients
      gradient_norms = torch.norm(W.grad[persistent_mask][:, 7:9], dim=1, p=2)
      gaussian_norms = torch.norm(torch.sigmoid(W.data[persistent_mask][:, 0:2]), dim=1, p=2)

      sorted_grads, sorted_grads_indices = torch.sort(gradient_norms, descending=True)
      sorted_gauss, sorted_gauss_indices = torch.sort(gaussian_norms, descending=True)

      large_gradient_mask = (sorted_grads > gradient_threshold)
      large_gradient_indices = sorted_grads_indices[large_gradient_mask]

      large_gauss_mask = (sorted_gauss > gaussian_threshold)
      large_gauss_indices = sorted_gauss_indices[large_gauss_mask]

      common_indices_mask = torch.isin(large_gradient_indices, large_gauss_indices)
      common_indices = large_gradient_indices[common_indices_mask]
      distinct_indices = large_gradient_indices[~common_indices_mask]

      # Split points with large coordinate gradient and large gaussian values and descale their gaussian
      if len(common_indices) > 0:
        with open(stat_path, 'a') as f:
            f.write('Number of splitted points: '+ str(len(common_indices))+'\n')
        # print(f"number of splitted points: {len(common_indices)}")
        start_index = current_marker + 1
        end_index = current_marker + 1 + len(common_indices)
        persistent_mask[start_index: end_index] = True
        W.data[start_index:end_index, :] = W.data[common_indices, :]
        scale_reduction_factor = 1.6
        W.data[start_index:end_index, 0:2] /= scale_reduction_factor
        W.data[common_indices, 0:2] /= scale_reduction_factor
        current_marker = current_marker + len(common_indices)

      # Clone it points with large coordinate gradient and small gaussian values
      if len(distinct_indices) > 0:
        with open(stat_path, 'a') as f:
            f.write(f'Number of cloned points: {len(distinct_indices)}\n')
        # print(f"number of cloned points: {len(distinct_indices)}")
        start_index = current_marker + 1
        end_index = current_marker + 1 + len(distinct_indices)
        persistent_mask[start_index: end_index] = True
        W.data[start_index:end_index, :] = W.data[distinct_indices, :]
        current_marker = current_marker + len(distinct_indices)

    optimizer.step()

    loss_history.append(loss.item())

    if epoch % display_interval == 0:

        generated_array = g_tensor_batch.cpu().detach().numpy()

    print(f"Epoch {epoch+1}/{num_epochs}, Loss: {loss.item()}, on {len(output)} points", end="\r")
    record.append({'loss': loss.item(), 'W': W.detach().numpy().copy(), 'mask': persistent_mask.numpy().copy(),
                   'image': g_tensor_batch.detach().numpy()})

with open(stat_path, 'a') as f:
    f.write(f"\nLoss: {loss_history[-1]}")
       
print("\nFinished training")
"""

SPLAT_STEPS = [
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("W.grad.data[~persistent_mask]", "W.grad(grads).data[~persistent_mask]"),
    ("torch.norm(W.grad[persistent_mask]", "torch.norm(W.grad(grads)[persistent_mask]"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def test_2d_gaussian_splatting_densifies_and_trains_as_torch(capsys, tmp_path):
    np.random.seed(391)
    rows, cols = np.mgrid[0:16, 0:16] / 15.0
    image = np.stack([rows, cols, 0.5 + 0.4 * np.sin(6 * rows * cols)], axis=-1)
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        SPLAT_SOURCE,
        SPLAT_STEPS,
        capsys,
        391,
        synthetic_image=image,
        make_output_directory=lambda lib: str(tmp_path / lib.__name__),
    )
    their_stats = (tmp_path / "torch" / "statistics.txt").read_text().splitlines()
    our_stats = (tmp_path / "retrograd" / "statistics.txt").read_text().splitlines()
    assert our_stats[:-1] == their_stats[:-1]  # the pruned, split and cloned counts
    assert any(line.startswith("Number of") for line in their_stats)
    np.testing.assert_allclose(
        float(our_stats[-1].split()[-1]), float(their_stats[-1].split()[-1]), rtol=1e-5
    )
    assert our_log.count("Epoch") == their_log.count("Epoch") == 8
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
